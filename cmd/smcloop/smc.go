package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/internal/bench"
)

func init() { transportRegistrars = append(transportRegistrars, registerSMC) }

// slowHandshake is the server handshake delay of the -slowhs transports (fault
// injection, as on a loaded host). With the default 64 handshake workers it caps
// handshakes at 64 per slowHandshake, 3,200 a second, below what loopback TCP manages on
// a small machine, so at the bench's default concurrency of 256 the handshakes congest
// and the difference handshake limitation makes shows.
const slowHandshake = 20 * time.Millisecond

// registerSMC adds the smcloop transports: SMC-D with blocking doorbells, and with a
// 200 µs busy-poll budget, and listener variants for the connection modes. Ping-pong and
// stream refuse a connection that fell back to TCP (through the Mode hook), so TCP
// figures can never be posted under an smcd name; the connection modes count both.
func registerSMC() {
	on, off := true, false
	for _, t := range []struct {
		name string
		cfg  smcloop.Config
		lc   smcloop.ListenConfig // Config is set from cfg
	}{
		{"smcd", smcloop.Config{}, smcloop.ListenConfig{}},                                          // defaults: doorbells, adaptive spin
		{"smcd-nospin", smcloop.Config{BusyPoll: -1}, smcloop.ListenConfig{}},                       // doorbells only
		{"smcd-busypoll", smcloop.Config{BusyPoll: 200 * time.Microsecond}, smcloop.ListenConfig{}}, // 200 µs busy-poll budget
		// Handshake limitation (SMC_LIMIT_HS) on: congested handshakes make new clients TCP.
		{"smcd-limit", smcloop.Config{}, smcloop.ListenConfig{LimitHandshake: &on}},
		// Every server handshake delayed by slowHandshake, without and with limitation.
		{"smcd-slowhs", smcloop.Config{}, smcloop.ListenConfig{HandshakeDelay: slowHandshake, LimitHandshake: &off}},
		{"smcd-slowhs-limit", smcloop.Config{}, smcloop.ListenConfig{HandshakeDelay: slowHandshake, LimitHandshake: &on}},
	} {
		name, cfg, lc := t.name, t.cfg, t.lc
		lc.Config = cfg
		bench.Register(bench.Transport{
			Name: name,
			Listen: func(ctx context.Context) (net.Listener, error) {
				return lc.Listen(ctx, "tcp", "127.0.0.1:0")
			},
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				d := smcloop.Dialer{Config: cfg}
				return d.DialContext(ctx, "tcp", addr)
			},
			Mode:          smcMode,
			ListenerStats: smcListenerStats,
			Stall:         stallDial,
		})
	}
}

// smcMode tells whether an smcloop connection uses SMC-D, and its mode as smcss shows it.
func smcMode(c net.Conn) (bool, string) {
	sc, ok := c.(*smcloop.Conn)
	if !ok {
		return false, fmt.Sprintf("not an smcloop connection (%T)", c)
	}
	return sc.UsingSMC(), sc.Mode()
}

// smcListenerStats reads an smcloop listener's counters.
func smcListenerStats(ln net.Listener) bench.ListenerStats {
	l, ok := ln.(*smcloop.Listener)
	if !ok {
		return bench.ListenerStats{}
	}
	s := l.Stats()
	return bench.ListenerStats{
		Accepted: s.Accepted, SMC: s.SMC, Fallback: s.Fallback, HandshakeErrs: s.HandshakeErrs,
		Congested: s.Congested, Withdrawn: s.Withdrawn, BacklogFull: s.BacklogFull,
		PendingNow: s.PendingNow, HandshakingNow: s.HandshakingNow,
	}
}
