package command

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/smcloop/smcloop/internal/bench"
	"github.com/smcloop/smcloop/internal/bench/remote"
	"github.com/urfave/cli/v2"
)

// The subcommands of a run between two hosts.
const (
	// HostName is the command that runs server children for clients on other hosts.
	HostName = "bench-host"
	// RelayName is the hidden subcommand a bench client with --server-host re-executes
	// itself with: it relays its stdin and stdout to a server child on the bench host.
	RelayName = "bench-relay"
)

// hostCheckTimeout bounds bench --server-host's check that the bench host answers.
const hostCheckTimeout = 5 * time.Second

// Host is the "bench-host" command: it serves control connections from bench clients on
// other hosts (bench --server-host), starting a server child for each.
func Host() *cli.Command {
	return &cli.Command{
		Name:  HostName,
		Usage: "run benchmark servers for a bench client on another host (smcloop bench --server-host)",
		Description: `Listens for control connections of smcloop bench --server-host on another host.
For each, it checks the server arguments the client sent, starts a server child on
this host (this binary, re-executed), listening on --listen's IP address, and relays
the child's stdin, stdout and stderr over the connection. Closing the connection
kills the child. It logs every session, and the children's stderr, to stderr, and
runs until interrupted.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Required: true, Usage: "control address `IP:PORT`, e.g. 10.0.0.1:7700; the servers listen on its IP"},
			&cli.IntFlag{Name: "max-sessions", Value: remote.DefaultMaxSessions, Usage: "server children at once"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("%s: unexpected arguments %q", HostName, c.Args().Slice())
			}
			ap, err := parseHostAddr("--listen", c.String("listen"))
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding this program to start servers: %w", err)
			}
			ln, err := net.Listen("tcp", ap.String())
			if err != nil {
				return fmt.Errorf("--listen %s: %w", ap, err)
			}
			fmt.Fprintf(c.App.ErrWriter, "%s: listening on %s\n", HostName, ln.Addr())
			h := &remote.Host{
				Command: func(args []string) *exec.Cmd {
					return exec.Command(exe, append([]string{ServerName}, args...)...)
				},
				Check:       func(args []string) error { return checkHostArgs(ap.Addr(), args) },
				Log:         c.App.ErrWriter,
				MaxSessions: c.Int("max-sessions"),
			}
			return h.Serve(c.Context, ln)
		},
	}
}

// Relay is the hidden command that a bench client with --server-host runs as a server
// child: "bench-relay IP:PORT ARGS...". It exits with the remote child's status.
func Relay() *cli.Command {
	return &cli.Command{
		Name:            RelayName,
		Usage:           "relay a server child on a bench host (started by smcloop bench --server-host)",
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) < 1 {
				return fmt.Errorf("%s: want the bench host's address and the server's arguments", RelayName)
			}
			status, err := remote.Relay(c.Context, args[0], args[1:], os.Stdin, os.Stdout, os.Stderr)
			if err != nil {
				return err
			}
			if status != 0 {
				os.Exit(min(max(status, 1), 255))
			}
			return nil
		},
	}
}

// ErrHostAddr is matched by the errors of a bench host address that cannot be used.
var ErrHostAddr = errors.New("unusable bench host address")

// parseHostAddr parses a bench host's control address: an IP address, not unspecified,
// and a port.
func parseHostAddr(flag, s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Addr().IsUnspecified() || ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("%w: %s %q: want the bench host's IP address and port, like 10.0.0.1:7700 (the servers listen on that IP; on the server host run: smcloop %s --listen 10.0.0.1:7700)",
			ErrHostAddr, flag, s, HostName)
	}
	return ap, nil
}

// checkHostArgs checks the server arguments a bench client sent: what a server child
// takes (bench.ParseServerArgs), with --lifeline (the child must end with its
// connection) and --listen-ip this host's control IP.
func checkHostArgs(ip netip.Addr, args []string) error {
	sa, err := bench.ParseServerArgs(args)
	if err != nil {
		return err
	}
	if !sa.Lifeline {
		return errors.New("the server arguments lack --lifeline")
	}
	if sa.Busy {
		return errors.New("a bench host starts no busy neighbours")
	}
	if sa.ListenIP != ip.String() {
		return fmt.Errorf("--listen-ip %q: this bench host serves on %s", sa.ListenIP, ip)
	}
	return nil
}

// serverHost checks bench --server-host's value and that a bench host accepts
// connections there, and returns the ServerCmd that relays to it.
func serverHost(exe, value string) (bench.ServerCmd, error) {
	ap, err := parseHostAddr("--server-host", value)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", ap.String(), hostCheckTimeout)
	if err != nil {
		return nil, fmt.Errorf("--server-host %s: no bench host answers (%w); on that host run: smcloop %s --listen %s", ap, err, HostName, ap)
	}
	c.Close()
	return func(args []string) *exec.Cmd {
		args = append(slices.Clone(args), "--listen-ip", ap.Addr().String())
		return exec.Command(exe, append([]string{RelayName, ap.String()}, args...)...)
	}, nil
}
