package main

import (
	"github.com/smcloop/smcloop/internal/bench/command"
	"github.com/smcloop/smcloop/internal/bench/smctransport"
	"github.com/urfave/cli/v2"
)

var benchOptions = command.Options{Program: "smcloop", SlowHandshake: smctransport.SlowHandshake}

func benchCommand() *cli.Command { return command.Bench(benchOptions) }

func serveCommand() *cli.Command { return command.Serve() }

func clientCommand() *cli.Command { return command.Client(benchOptions) }

func benchServerCommand() *cli.Command { return command.Server() }

func benchHostCommand() *cli.Command { return command.Host() }

func benchRelayCommand() *cli.Command { return command.Relay() }
