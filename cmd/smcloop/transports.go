package main

import (
	"github.com/smcloop/smcloop/internal/bench"
	"github.com/smcloop/smcloop/internal/bench/smctransport"
)

// registerTransports registers the transports this binary can benchmark: the built-in
// tcp and unix, and smcloop's. Both the bench client and its server children run it, so
// the two always know the same names.
func registerTransports() {
	bench.RegisterBuiltins()
	smctransport.Register()
}
