// Command smcloop is the command-line companion of the smcloop module, a userspace SMC-D
// transport. "smcloop bench" compares smcloop with Go TCP loopback and unix sockets.
package main

import (
	"github.com/urfave/cli/v2"

	"github.com/smcloop/smcloop/internal/bench/command"
)

func main() {
	registerTransports()
	command.Main(newApp())
}

func newApp() *cli.App {
	return &cli.App{
		Name:        "smcloop",
		Usage:       "userspace SMC-D: a net.Conn whose bytes move through shared memory",
		HideVersion: true,
		Commands: []*cli.Command{
			benchCommand(),
			benchServerCommand(),
			benchHostCommand(),
			benchRelayCommand(),
			serveCommand(),
			clientCommand(),
			versionCommand(),
			ssCommand(),
			statsCommand(),
			chkCommand(),
		},
	}
}
