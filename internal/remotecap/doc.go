// Package remotecap is the SMC capability signal across hosts, for SMC-R: what the
// kernel's TCP option (kind 254, magic E2D4C3D9) in the SYN and SYN-ACK does, which
// user space cannot send.
//
// An smcloop listener that offers SMC-R binds UDP on its TCP address and port number
// (a Responder). It answers a fixed-size, versioned probe with its capabilities, its
// instance id and a cookie for the prober's IP, and records announced connections:
// before connect() a dialer binds its TCP socket's port and sends an announcement
// naming that port, the cookie and a nonce; only once the listener acknowledges it does
// the dialer connect and speak CLC first. On accept the listener takes the connection's
// announcement from its Table: an announced connection will speak CLC, any other is
// plain TCP from its first byte. Neither side waits on a plain peer, and both decide
// before the first byte.
//
// A dialer keeps what it learnt per destination in a bounded Cache: an Unknown
// destination is dialed plain at once while a background probe, rate-limited, finds
// out for later dials.
//
// Every datagram is MsgLen bytes, so an answer is never larger than what asked for it.
// docs/CAPABILITY.md ("Across hosts") has the design, its threat model and its cost.
package remotecap
