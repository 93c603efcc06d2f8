// Package remote runs benchmark server children on another host, for a run of
// smcloop bench between two hosts (SMC-R, or TCP across a network).
//
// The harness talks to a server child over the child's stdin and stdout (see
// bench.ServerCmd). Between two hosts, a Host on the server's host accepts control
// connections; for each it starts a server child with the arguments the connection
// names, after checking them, and relays the child's stdin, stdout and stderr over the
// connection. On the client's host, the harness's ServerCmd starts a relay process
// (Relay) that connects to the Host and relays its own stdin and stdout, so the
// harness sees the remote child as if it were local.
//
// The control connection is the child's lifeline: when it ends, or its peer stops
// reading, the child is killed. Every wait is bounded, and everything read from the
// connection is checked (the wire format is in wire.go).
package remote
