package smctransport

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/internal/bench"
)

// Register adds smcloop's transports to the harness: those of registerSMC, registerMixed
// and registerCLCReference, smcd-zc (zerocopy.go) and smcr (smcr.go). A program that benchmarks them
// calls it (after bench.RegisterBuiltins) in the client and its server children alike.
func Register() {
	registerSMC()
	registerMixed()
	registerCLCReference()
	registerZeroCopy()
	registerSMCR()
}

// SlowHandshake is the server handshake delay of the -slowhs transports, for help texts.
const SlowHandshake = slowHandshake

// slowHandshake is the server handshake delay of the -slowhs transports (fault
// injection, as on a loaded host). With the default 256 handshake workers it caps
// handshakes at 256 per slowHandshake, 3,200 a second, below what loopback TCP manages on
// a small machine, so that handshakes congest and the difference handshake limitation
// makes shows.
const slowHandshake = 80 * time.Millisecond

// maxDMB is SMC-D's largest buffer (DMB), 1 MiB.
const maxDMB = 1 << 20

// registerSMC adds the smcloop transports: SMC-D with blocking doorbells, and with a
// 200 µs busy-poll budget, send-path variants for the presets, and listener
// variants for the connection modes. Ping-pong and stream refuse a connection that fell
// back to TCP (through the Mode hook), so TCP figures can never be posted under an smcd
// name; the connection modes count both.
func registerSMC() {
	on, off := true, false
	for _, t := range []struct {
		name string
		desc string
		cfg  smcloop.Config
		lc   smcloop.ListenConfig // Config is set from cfg
	}{
		{"smcd", "smcloop defaults (elastic 1 MiB DMB, short adaptive spin-yield, then a short futex sleep if the process is idle, before the doorbell; autosplit 32 KiB)",
			smcloop.Config{}, smcloop.ListenConfig{}}, // doorbells; busy polling only if SMCLOOP_BUSY_POLL sets it
		{"smcd-nospin", "smcloop, no spinning: every wait sleeps at once (BusyPoll -1)", smcloop.Config{BusyPoll: -1}, smcloop.ListenConfig{}},
		// 1 MiB DMBs, SMC-D's largest, as the kernel's loopback-ism figures use.
		{"smcd-1m", "smcloop, fixed 1 MiB DMB (RMem/WMem 1 MiB: all of it allocated at setup, as loopback-ism's published figures)",
			smcloop.Config{RMem: maxDMB, WMem: maxDMB}, smcloop.ListenConfig{}},
		{"smcd-busypoll", "smcloop, RMem/WMem 1 MiB, 200 µs busy-poll budget (give each process its own CPU: --pin)",
			smcloop.Config{RMem: maxDMB, WMem: maxDMB, BusyPoll: 200 * time.Microsecond}, smcloop.ListenConfig{}},
		{"smcd-copy", "smcloop, RMem/WMem 1 MiB, copying sends (own send buffer, then move_data)",
			smcloop.Config{RMem: maxDMB, WMem: maxDMB, SendMode: smcloop.SendCopy}, smcloop.ListenConfig{}},
		// The autocork preset: autocorking on (it is off by default; see docs/TUNING.md).
		{"smcd-autocork", "smcloop defaults with autocorking on (AutocorkSize 64 KiB, the kernel's autocorking_size)", smcloop.Config{AutocorkSize: 64 << 10}, smcloop.ListenConfig{}},
		// The autosplit preset: 1 MiB buffers (SMC-D's largest DMB, at least the 512 KiB
		// wmem/rmem the reference table used), autosplit at the patch's default 128 KiB and off.
		{"smcd-1m-split", "smcloop, RMem/WMem 1 MiB (SMC-D's largest DMB), autosplit 128 KiB (the patch's default)",
			smcloop.Config{RMem: maxDMB, WMem: maxDMB, AutosplitSize: 128 << 10}, smcloop.ListenConfig{}},
		{"smcd-1m-nosplit", "smcloop, RMem/WMem 1 MiB (SMC-D's largest DMB), autosplit off",
			smcloop.Config{RMem: maxDMB, WMem: maxDMB, AutosplitSize: -1}, smcloop.ListenConfig{}},
		// Handshake limitation (SMC_LIMIT_HS) on: congested handshakes make new clients TCP.
		{"smcd-limit", "smcloop, handshake limitation on", smcloop.Config{}, smcloop.ListenConfig{LimitHandshake: &on}},
		// Every server handshake delayed by slowHandshake, without and with limitation.
		{"smcd-slowhs", "smcloop, server handshakes delayed " + slowHandshake.String(),
			smcloop.Config{}, smcloop.ListenConfig{HandshakeDelay: slowHandshake, LimitHandshake: &off}},
		{"smcd-slowhs-limit", "smcloop, server handshakes delayed " + slowHandshake.String() + ", handshake limitation on",
			smcloop.Config{}, smcloop.ListenConfig{HandshakeDelay: slowHandshake, LimitHandshake: &on}},
	} {
		name, cfg, lc := t.name, t.cfg, t.lc
		lc.Config = cfg
		bench.Register(bench.Transport{
			Name: name,
			Desc: t.desc,
			Listen: func(ctx context.Context) (net.Listener, error) {
				return lc.Listen(ctx, "tcp", "127.0.0.1:0")
			},
			ListenOn: func(ctx context.Context, addr string) (net.Listener, error) {
				return lc.Listen(ctx, "tcp", addr)
			},
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				d := smcloop.Dialer{Config: cfg}
				return d.DialContext(ctx, "tcp", addr)
			},
			Mode:          smcMode,
			ListenerStats: smcListenerStats,
			Stall:         stallDial,
			Cork:          smcCork,
			SendStats:     smcSendStats,
		})
	}
}

// registerMixed adds the plain-peer transports: a plain Go TCP client of an smcloop
// listener, and an smcloop dialer of a plain Go TCP listener. Every connection is TCP;
// against tcp they show what smcloop costs a plain peer (the capability signal, the
// listener's accept loop, the dialer's lookup).
func registerMixed() {
	tcp := bench.TCP()
	bench.Register(bench.Transport{
		Name: "tcp-to-smcd",
		Desc: "plain Go TCP client, smcloop listener (connections are TCP: the listener's cost for plain clients)",
		Listen: func(ctx context.Context) (net.Listener, error) {
			var lc smcloop.ListenConfig
			return lc.Listen(ctx, "tcp", "127.0.0.1:0")
		},
		Dial:          tcp.Dial,
		ListenerStats: smcListenerStats,
	})
	bench.Register(bench.Transport{
		Name:   "smcd-to-tcp",
		Desc:   "smcloop dialer, plain Go TCP listener (connections are TCP: the dialer's cost against plain servers)",
		Listen: tcp.Listen,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d smcloop.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		Mode: smcMode,
	})
}

// CLC message sizes of an smcloop connection in an existing link group (SMC-Dv2, one
// UEID, one ISM device): what the tcp-clc transport exchanges.
const (
	clcProposalLen = 224
	clcAcceptLen   = 78
	clcConfirmLen  = 78
)

// registerCLCReference adds tcp-clc: Go TCP whose connections first exchange three
// messages of the CLC Proposal, Accept and Confirm's sizes, then carry the data over TCP.
// It is what the CLC round trips alone cost a connection, with no shared memory at all:
// the ceiling for short-lived connections of any SMC that speaks CLC over the TCP
// connection, the kernel's included.
func registerCLCReference() {
	tcp := bench.TCP()
	bench.Register(bench.Transport{
		Name: "tcp-clc",
		Desc: "Go TCP plus three messages of the CLC exchange's sizes (" + fmt.Sprint(clcProposalLen, "/", clcAcceptLen, "/", clcConfirmLen) + " bytes) before the data: the CLC round trips alone",
		Listen: func(ctx context.Context) (net.Listener, error) {
			ln, err := tcp.Listen(ctx)
			if err != nil {
				return nil, err
			}
			return clcRefListener{ln}, nil
		},
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := tcp.Dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			if err := clcRefClient(c); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
	})
}

// clcRefClient is the client's part of tcp-clc's exchange: proposal out, accept in,
// confirm out.
func clcRefClient(c net.Conn) error {
	var buf [clcProposalLen]byte
	if _, err := c.Write(buf[:clcProposalLen]); err != nil {
		return fmt.Errorf("tcp-clc: sending the proposal: %w", err)
	}
	if _, err := io.ReadFull(c, buf[:clcAcceptLen]); err != nil {
		return fmt.Errorf("tcp-clc: reading the accept: %w", err)
	}
	if _, err := c.Write(buf[:clcConfirmLen]); err != nil {
		return fmt.Errorf("tcp-clc: sending the confirm: %w", err)
	}
	return nil
}

// clcRefListener accepts tcp-clc connections; each does the server's part of the exchange
// before its first Read or Write.
type clcRefListener struct{ net.Listener }

func (l clcRefListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &clcRefConn{Conn: c}, nil
}

type clcRefConn struct {
	net.Conn
	once sync.Once
	err  error
}

// exchange reads the proposal, answers with the accept and reads the confirm.
func (c *clcRefConn) exchange() error {
	c.once.Do(func() {
		var buf [clcProposalLen]byte
		if _, c.err = io.ReadFull(c.Conn, buf[:clcProposalLen]); c.err != nil {
			return
		}
		if _, c.err = c.Conn.Write(buf[:clcAcceptLen]); c.err != nil {
			return
		}
		_, c.err = io.ReadFull(c.Conn, buf[:clcConfirmLen])
	})
	if c.err != nil {
		return fmt.Errorf("tcp-clc: server exchange: %w", c.err)
	}
	return nil
}

func (c *clcRefConn) Read(b []byte) (int, error) {
	if err := c.exchange(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *clcRefConn) Write(b []byte) (int, error) {
	if err := c.exchange(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// smcCork sets or clears corking on an smcloop connection (TCP_CORK on a fallback).
func smcCork(c net.Conn, on bool) error {
	sc, ok := c.(*smcloop.Conn)
	if !ok {
		return fmt.Errorf("cork: not an smcloop connection (%T)", c)
	}
	return sc.SetCork(on)
}

// smcSendStats reads an smcloop connection's send-path counters; a connection that fell
// back to TCP has none.
func smcSendStats(c net.Conn) (bench.SendStats, bool) {
	sc, ok := c.(*smcloop.Conn)
	if !ok || !sc.UsingSMC() {
		return bench.SendStats{}, false
	}
	s := sc.Stats()
	rw := s.ReadWaits
	return bench.SendStats{
		Writes: s.SMCWrites, Bytes: s.SMCBytesSent, Pushes: s.Pushes, CorkPushes: s.CorkPushes,
		SendfileCalls: s.SendfileCalls, Autocorked: s.Autocorked, AutosplitSegments: s.AutosplitSegments,
		WindowUpdates: s.WindowUpdates, Rings: s.RingsSent, Sleeps: s.Sleeps, DMB: s.RMBSize, PeerDMB: s.PeerRMBSize,
		ReadWaits: rw.Waits, ReadSpinHits: rw.SpinHits, ReadShortSleeps: rw.FutexHits,
		ReadDoorbells: rw.Waits - rw.SpinHits - rw.FutexHits - rw.Deadlines - rw.RecheckHits,
	}, true
}

// smcMode tells whether an smcloop connection uses SMC-D, and its mode as smcss shows it.
// The text of a fallback depends only on its two reason codes and is built once per pair
// (the short-lived connection mode asks for every connection).
func smcMode(c net.Conn) (bool, string) {
	sc, ok := c.(*smcloop.Conn)
	if !ok {
		return false, fmt.Sprintf("not an smcloop connection (%T)", c)
	}
	if sc.UsingSMC() {
		return true, "SMCD"
	}
	local, peer := sc.FallbackReason()
	key := uint64(local)<<32 | uint64(peer)
	if m, ok := fallbackModes.Load(key); ok {
		return false, m.(string)
	}
	m, _ := fallbackModes.LoadOrStore(key, sc.Mode())
	return false, m.(string)
}

// fallbackModes caches fallback mode texts by reason codes (local<<32 | peer).
var fallbackModes sync.Map

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
