package main

import "github.com/smcloop/smcloop/internal/bench"

// transportRegistrars register the transports this binary can benchmark besides the
// built-in tcp and unix. A file that adds transports appends its function here from an
// init function. Both the bench client and its server children run them, so the two
// always know the same names.
var transportRegistrars []func()

func registerTransports() {
	bench.RegisterBuiltins()
	for _, register := range transportRegistrars {
		register()
	}
}
