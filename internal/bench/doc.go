// Package bench measures byte transports between two processes on one host the way
// sockperf and qperf do, so that smcloop and its baselines (Go TCP loopback, Go unix
// sockets) can be compared in one run.
//
// # Model
//
// A Transport is a pair of functions, Listen and Dial, that produce a net.Listener and a
// net.Conn. Transports are registered by name (Register, RegisterBuiltins) so that a
// server child, which is the same binary re-executed, can find the one the client asked for.
//
// Run drives a whole benchmark. For every measurement it starts a fresh server process
// through a ServerCmd, reads the line "LISTEN <addr>" from the child's stdout, dials that
// address with the transport under test and sends a 24-byte header (mode, message size,
// warm-up). The child prepares and answers with an 8-byte ready message, and only then
// does the client start its clock and the payload. The child serves exactly one
// connection and exits:
//
//   - ping-pong: the client writes one S-byte message, the server echoes it, the client
//     reads S bytes and records the round trip;
//   - stream: the client writes S-byte messages back to back; the server reads, verifies,
//     and measures its own receive interval after the warm-up.
//
// The client ends either mode with an end marker (the bitwise complement of the next
// message, so it cannot be confused with data); the server answers with a 72-byte report
// of what it received, which the client checks against what it sent, and of the CPU
// time its process used over its part of the measured interval. The protocol needs
// nothing beyond net.Conn: no half-close, no deadlines.
//
// # CPU time
//
// Each process reads its own user and system time (getrusage RUSAGE_SELF, every thread
// of the process) when its part of the measured interval starts and when it ends, and
// counts the operations in between (round trips, or messages): the client from its first
// measured round trip or the end of its warm-up to its last message, the server from the
// end of the warm-up (by its own clock, from the ready message) or the opening of its
// stream window to the end marker. The figure per operation is the sum of each
// process's CPU time per operation of its interval (CPUStats).
//
// # Zero-copy transports
//
// A transport with the ZeroCopy hook moves the payload through its own buffers: the
// sender reserves space (ZeroCopyWriter), fills the pattern in place and publishes it;
// the receiver leases unread bytes (ZeroCopyReader), verifies them in place and releases
// them. The loops are the harness's, so such a transport touches and verifies every byte
// like the others; the header, the ready message and the report go through Read and
// Write.
//
// Every payload byte comes from a fixed pseudo-random pattern at a message-dependent
// offset and is verified by its receiver, echoes by the client. A mismatch fails the run
// with an error matching ErrMismatch. A server child reports failure as one line
// "FAIL <kind> <text>" on its stdout before exiting non-zero.
//
// Floors (copy() bandwidth, the cache-line ping-pong between two threads, and a stream of
// each size between two threads that copy every byte in and out and check it) are measured
// in-process and printed beside the tables: they bound what any transport (the last, any
// that copies in and out) can reach. The header also says where the scheduler runs a woken
// thread (internal/wakeprobe), which decides how much of that an unpinned run can use.
//
// A transport whose I/O fails with an error matching ErrFallback has left its own path in
// the middle of a measurement: that round posts no figure and is recorded as fallen
// back, and the run goes on.
//
// Serve is a server started on its own, serving such connections one after another;
// Run with Config.Addr measures against it instead of starting server children.
//
// # Connection modes
//
// The short-lived connection mode (Config.Conn, as wrk -H 'Connection: Close')
// starts a server child with --conns, which serves connections until told to stop: each
// client connection is dial, a 64-byte request made from the connection's sequence number,
// the server's verified answer (the request's complement), and close, the server closing
// first. Many clients run at once; every failure (dial, I/O, a wrong byte, the time limit)
// is counted with its first error texts, never fatal. The child reports what it served and,
// for transports with the ListenerStats hook, its listener's counters; the Mode hook splits
// the client's connections into shared memory and fallbacks.
//
// The overload mode (Config.Overload, handshake limitation's case) holds handshakes open at
// such a server with clients from the Stall hook, and meanwhile measures plain TCP clients
// and the transport's own clients against it.
//
// A --conns child takes commands on stdin, one a line: "stats" answers "STATS <json>"
// (the listener's counters, or null), "stop" ends the service with "REPORT <json>".
//
// # HTTP mode
//
// The HTTP mode (Config.HTTP, as nginx and wrk -c 100) starts a server child with
// --http METHOD, which writes a file to a fresh temporary directory and runs a net/http
// server on the transport's listener until told to stop. The sendfile method corks the
// connection (the Cork hook), serves the file with http.ServeContent, whose body
// net/http hands to the connection's ReadFrom, and uncorks; the write method reads the
// file and writes it. Keep-alive clients of an http.Client dialing with the transport
// GET the file back to back; every response's status, length and bytes are verified,
// and failures are counted like the connection mode's. The child reports what it served,
// how many bodies went through the connection's ReadFrom from the file, and the sum of
// its connections' send-path counters (the SendStats hook).
//
// # Presets and comparison tables
//
// A Preset names the options that reproduce one reference table (autocork, autosplit,
// sendfile; docs/HISTORY.md lists them). Its Comparison pairs two transports that
// differ in one feature; when both are measured, the text report prints one row per
// size, with percentage columns for each transport against the baseline and for the
// feature, and the send-path counters that show the feature at work.
package bench
