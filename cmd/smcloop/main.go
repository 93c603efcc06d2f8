// Command smcloop is the command-line companion of the smcloop module, a userspace SMC-D
// transport. "smcloop bench" compares smcloop with Go TCP loopback and unix sockets.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	registerTransports()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newApp().RunContext(ctx, os.Args)
	stop()
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = errors.New("interrupted")
		}
		fmt.Fprintln(os.Stderr, "smcloop:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:        "smcloop",
		Usage:       "userspace SMC-D: a net.Conn whose bytes move through shared memory",
		HideVersion: true,
		Commands: []*cli.Command{
			benchCommand(),
			benchServerCommand(),
			serveCommand(),
			clientCommand(),
			versionCommand(),
			ssCommand(),
			statsCommand(),
			chkCommand(),
		},
	}
}
