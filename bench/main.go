// Command bench is "smcloop bench" with other shared-memory transports beside smcloop's,
// so that they are measured in the same run, by the same harness, with every payload
// byte verified: shmipc-go's Stream API ("shmipc") and its zero-copy buffers
// ("shmipc-zc"). It lives in a module of its own so that the smcloop module never
// depends on the libraries it is compared with.
//
//	go run . bench -t smcd,tcp,unix,shmipc,shmipc-zc --mode both --duration 500ms
//
// "server" and "client" run the two sides from two shells:
//
//	go run . server -t shmipc-zc --listen /tmp/shmipc.sock
//	go run . client /tmp/shmipc.sock -t shmipc-zc
package main

import (
	"fmt"
	"os"

	"github.com/smcloop/smcloop/internal/bench"
	"github.com/smcloop/smcloop/internal/bench/command"
	"github.com/smcloop/smcloop/internal/bench/smctransport"
	"github.com/urfave/cli/v2"
)

func main() {
	if err := separateStdout(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	registerTransports()
	command.Main(newApp())
}

// registerTransports registers every transport this program measures; the client and
// its server children (the same binary) run it alike.
func registerTransports() {
	bench.RegisterBuiltins()
	smctransport.Register()
	registerShmipc()
}

func newApp() *cli.App {
	return &cli.App{
		Name:        "bench",
		Usage:       "smcloop bench, with shmipc-go's transports beside smcloop's",
		HideVersion: true,
		Writer:      os.Stdout, // after separateStdout
		Commands: []*cli.Command{
			command.Bench(command.Options{Program: "bench", SlowHandshake: 0}),
			command.Server(),
			command.Host(),
			command.Relay(),
			command.Serve(),
			command.Client(command.Options{Program: "bench"}),
		},
	}
}
