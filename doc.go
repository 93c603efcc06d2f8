// Package smcloop is SMC-D (Shared Memory Communications over an ISM device, RFC 7609
// and the SMCv2 protocol of Linux net/smc) in user space: a net.Conn and a net.Listener
// for fast communication between processes on one host.
//
// Two processes open an ordinary TCP connection and run the SMC CLC handshake over it.
// If both sides can, the bytes then flow through shared memory: each side owns a DMB (a
// sealed memfd region, its receive ring) that the other maps and writes into directly,
// with doorbells rung only for a sleeping reader or writer; the TCP connection stays open
// only as the liveness channel. If either side says no, the same TCP connection carries the bytes: a
// transparent fallback, with the kernel's decline codes to say why.
//
//	ln, _ := smcloop.Listen("tcp", "127.0.0.1:7000")   // server process
//	c, _ := ln.Accept()
//
//	c, _ := smcloop.Dial("tcp", "127.0.0.1:7000")       // client process
//	fmt.Println(c.Mode())                               // "SMCD", or "TCP 0x03010000/..."
//
// A dialer speaks CLC only to a local smcloop listener and a listener expects it only
// from an smcloop dialer (docs/CAPABILITY.md), so either works unchanged against plain
// TCP peers, whichever side speaks first. Listen("unix", path) and Dial("unix", path) do
// the same over a unix stream socket. DialContext fits http.Transport and
// grpc.WithContextDialer: it returns once the connection is up and handshakes in the
// background.
//
// Beyond net.Conn, *Conn has the SMC socket's controls: SetCork (TCP_CORK), WriteMore
// (MSG_MORE), SetNoDelay, CloseWrite and CloseRead, ReadFrom (sendfile: a file's pages go
// straight into the peer's buffer) and WriteTo, and it reports what is on the wire
// (UsingSMC, Mode, FallbackReason, State) and its counters (Stats). Settings come from
// Config and ListenConfig, with process defaults from SMCLOOP_* environment variables
// (docs/TUNING.md; Environment lists them). SMCLOOP_SMCD=off (or 0, or false) turns SMC-D
// off for the process, as Config.DisableSMC does; SMCLOOP_REQUIRE_SMC=on (or 1, or true)
// makes a fallback an error, as Config.RequireSMC does; SMCLOOP_BUSY_POLL=200us sets a
// busy-poll budget, and 0 keeps the default adaptive spin-yield.
//
// Errors follow net's conventions. Every error of a Conn, a Dial or a Listener is a
// *net.OpError whose Net is the network the caller gave ("tcp", "tcp4", "tcp6" or
// "unix"), whether the connection uses SMC or fell back, and beneath it errors.Is sees
// the errno a kernel SMC socket would return (syscall.ECONNRESET for ErrPeerReset and
// ErrPeerGone, EPIPE, ECONNABORTED), net.ErrClosed after Close and
// os.ErrDeadlineExceeded for a deadline. A handshake that fails without a fallback
// returns a *HandshakeError; one caused by a malformed CLC message, like a shared-memory
// cursor out of range (*ProtocolError), matches ErrProtocol. A fallback refused by
// RequireSMC is a *FallbackError, which matches clc.ErrDeclined.
//
// SMC-D needs Linux (memfd DMBs, eventfd doorbells, fd passing). The module builds on
// every OS; elsewhere Dial and Listen speak no CLC and every connection is plain TCP with
// fallback reason NOSMCDEV, as a kernel SMC socket on a host without an SMC device
// falls back.
//
// The packages below the module root are the layers: shm (fd passing, peer credentials,
// memfd regions), ism (the emulated ISM device: DMBs in memfd slabs, one signal channel
// per device pair, in-process bells), cdc (cursors and the CDC area),
// clc (handshake messages), smcd (the SMC-D backend and its link groups), smcr (the
// SMC-R backend over RDMA verbs and its wire parts). The connection core in this package knows no backend: the SMC-D steps of
// the handshake are in one file beside the shared CLC exchange, and docs/ARCHITECTURE.md
// ("Adding a backend") describes how another backend joins.
package smcloop
