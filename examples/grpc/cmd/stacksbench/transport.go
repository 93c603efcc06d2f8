package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/examples/grpc/smccreds"
)

// The transports, each with what it is.
var transportDocs = map[string]string{
	"smcloop": "smcloop.Listen / smcloop.Dialer over 127.0.0.1, default settings (no Config, no SMCLOOP_* variables)",
	"tcp":     "Go TCP over 127.0.0.1 (net.Listen / net.Dialer), kernel defaults",
	"unix":    "Go unix stream socket",
	// Not run by default: a diagnosis of what the default wait's spinning costs.
	"smcloop-nospin": "smcloop with Config.BusyPoll -1: every wait sleeps on the doorbell at once (not a default)",
	"smcloop-poll":   "smcloop with Config.BusyPoll 1ms: every wait spins up to 1 ms before it sleeps (not a default)",
}

var allTransports = []string{"smcloop", "tcp", "unix"}

// smc reports whether transport tr is smcloop's.
func smc(tr string) bool { return strings.HasPrefix(tr, "smcloop") }

// noSpin is smcloop-nospin's configuration.
var noSpin = smcloop.Config{BusyPoll: -1}

// poll is smcloop-poll's configuration.
var poll = smcloop.Config{BusyPoll: time.Millisecond}

// listen opens a server's listener on transport tr; unix sockets go in dir as name.sock.
func listen(tr, dir, name string) (net.Listener, error) {
	switch tr {
	case "smcloop":
		return smcloop.Listen("tcp", "127.0.0.1:0")
	case "smcloop-nospin":
		lc := smcloop.ListenConfig{Config: noSpin}
		return lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	case "smcloop-poll":
		lc := smcloop.ListenConfig{Config: poll}
		return lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	case "tcp":
		return net.Listen("tcp", "127.0.0.1:0")
	case "unix":
		return net.Listen("unix", filepath.Join(dir, name+".sock"))
	}
	return nil, fmt.Errorf("unknown transport %q", tr)
}

// modeOf names what carries a connection: its smcloop Mode, or "not smcloop (NET)".
func modeOf(c net.Conn) string { return smccreds.NewInfo(c).Mode }

// recorder dials the connections of one measurement on one transport, whatever address
// the client library asks for, and remembers them: how many, their modes, their counters.
type recorder struct {
	transport, addr string

	mu    sync.Mutex
	conns []net.Conn
	at    []time.Duration // when each was dialed, since start
	dials []time.Duration // how long each successful dial took
	start time.Time
}

func newRecorder(tr, addr string) *recorder {
	return &recorder{transport: tr, addr: addr, start: time.Now()}
}

func (r *recorder) dial(ctx context.Context, _ string) (net.Conn, error) {
	t0 := time.Now()
	var (
		c   net.Conn
		err error
	)
	switch r.transport {
	case "smcloop":
		c, err = smcloop.DialContext(ctx, "tcp", r.addr)
	case "smcloop-nospin":
		d := smcloop.Dialer{Config: noSpin}
		c, err = d.DialConn(ctx, "tcp", r.addr)
	case "smcloop-poll":
		d := smcloop.Dialer{Config: poll}
		c, err = d.DialConn(ctx, "tcp", r.addr)
	case "tcp":
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", r.addr)
	case "unix":
		var d net.Dialer
		c, err = d.DialContext(ctx, "unix", r.addr)
	default:
		err = fmt.Errorf("unknown transport %q", r.transport)
	}
	if err != nil {
		return nil, err
	}
	// Nothing here may wait for the connection: smcloop.DialContext returns before the
	// CLC handshake ends, and asking for the mode now would wait for it and make the dial
	// as slow as a synchronous one (a pool then dials more). Modes are read afterwards.
	d := time.Since(t0)
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.at = append(r.at, t0.Sub(r.start))
	r.dials = append(r.dials, d)
	r.mu.Unlock()
	return c, nil
}

// redials describes, for each dial after the first, the states of the connections dialed
// before it, as they are now: why a client that should keep its connections made more.
func (r *recorder) redials() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i := 1; i < len(r.conns); i++ {
		states := make([]string, i)
		for j, old := range r.conns[:i] {
			states[j] = "-"
			if sc, ok := old.(*smcloop.Conn); ok {
				states[j] = sc.State().String()
			}
		}
		out = append(out, fmt.Sprintf("dial %d at +%s: the earlier connections are now %s",
			i+1, r.at[i].Round(time.Millisecond), strings.Join(states, ",")))
	}
	return out
}

// dialTimes returns the median and the longest dial.
func (r *recorder) dialTimes() (p50, longest time.Duration) {
	r.mu.Lock()
	d := slices.Sorted(slices.Values(r.dials))
	r.mu.Unlock()
	if len(d) == 0 {
		return 0, 0
	}
	return d[len(d)/2], d[len(d)-1]
}

// dialHTTP is dial with http.Transport's signature.
func (r *recorder) dialHTTP(ctx context.Context, _, addr string) (net.Conn, error) {
	return r.dial(ctx, addr)
}

func (r *recorder) snapshot() (dials int, modes map[string]int, sum counters) {
	r.mu.Lock()
	defer r.mu.Unlock()
	modes = make(map[string]int)
	for _, c := range r.conns {
		modes[modeOf(c)]++
	}
	return len(r.conns), modes, sumCounters(r.conns)
}

// counters are the smcloop.ConnStats of a set of connections, added up.
type counters struct {
	Conns             int    `json:"conns"`
	SMCWrites         uint64 `json:"smc_writes"`
	SMCReads          uint64 `json:"smc_reads"`
	SMCBytesSent      uint64 `json:"smc_bytes_sent"`
	SMCBytesRecv      uint64 `json:"smc_bytes_recv"`
	TCPBytesSent      uint64 `json:"tcp_bytes_sent"`
	TCPBytesRecv      uint64 `json:"tcp_bytes_recv"`
	RingsSent         uint64 `json:"rings_sent"`
	RingsSuppressed   uint64 `json:"rings_suppressed"`
	Sleeps            uint64 `json:"sleeps"`
	Pushes            uint64 `json:"pushes"`
	Autocorked        uint64 `json:"autocorked"`
	AutosplitSegments uint64 `json:"autosplit_segments"`
	WindowUpdates     uint64 `json:"window_updates"`
	RMBSize           int    `json:"rmb_size"`
	PeerRMBSize       int    `json:"peer_rmb_size"`
	Waits             waits  `json:"waits"` // reads' and writes' together
}

func sumCounters(conns []net.Conn) counters {
	var s counters
	for _, c := range conns {
		sc, ok := c.(*smcloop.Conn)
		if !ok {
			continue
		}
		st := sc.Stats()
		s.Conns++
		s.SMCWrites += st.SMCWrites
		s.SMCReads += st.SMCReads
		s.SMCBytesSent += st.SMCBytesSent
		s.SMCBytesRecv += st.SMCBytesRecv
		s.TCPBytesSent += st.TCPBytesSent
		s.TCPBytesRecv += st.TCPBytesRecv
		s.RingsSent += st.RingsSent
		s.RingsSuppressed += st.RingsSuppressed
		s.Sleeps += st.Sleeps
		s.Pushes += st.Pushes
		s.Autocorked += st.Autocorked
		s.AutosplitSegments += st.AutosplitSegments
		s.WindowUpdates += st.WindowUpdates
		s.RMBSize = max(s.RMBSize, st.RMBSize)
		s.PeerRMBSize = max(s.PeerRMBSize, st.PeerRMBSize)
		s.Waits = s.Waits.add(st.ReadWaits, false).add(st.WriteWaits, false)
	}
	return s
}

// sub returns the counts of c since earlier (the sizes and connections as in c).
func (c counters) sub(earlier counters) counters {
	d := c
	d.Waits = d.Waits.add(earlier.Waits.stats(), true)
	d.SMCWrites -= earlier.SMCWrites
	d.SMCReads -= earlier.SMCReads
	d.SMCBytesSent -= earlier.SMCBytesSent
	d.SMCBytesRecv -= earlier.SMCBytesRecv
	d.TCPBytesSent -= earlier.TCPBytesSent
	d.TCPBytesRecv -= earlier.TCPBytesRecv
	d.RingsSent -= earlier.RingsSent
	d.RingsSuppressed -= earlier.RingsSuppressed
	d.Sleeps -= earlier.Sleeps
	d.Pushes -= earlier.Pushes
	d.Autocorked -= earlier.Autocorked
	d.AutosplitSegments -= earlier.AutosplitSegments
	d.WindowUpdates -= earlier.WindowUpdates
	return d
}

func subModes(now, earlier map[string]int) map[string]int {
	d := map[string]int{}
	for m, n := range now {
		if n -= earlier[m]; n != 0 {
			d[m] = n
		}
	}
	return d
}

// waits is a side's smcloop.WaitStats: how its blocking Reads and Writes ended.
type waits struct {
	Waits       uint64 `json:"waits"`
	SpinHits    uint64 `json:"spin_hits"`
	SpinMisses  uint64 `json:"spin_misses"`
	SpinSkips   uint64 `json:"spin_skips"`
	FutexHits   uint64 `json:"futex_hits"`
	FutexMisses uint64 `json:"futex_misses"`
	Deadlines   uint64 `json:"deadlines"`
	RecheckHits uint64 `json:"recheck_hits"`
	LongSpins   uint64 `json:"long_spins"`
}

// add returns w + o, or w - o with minus, field by field.
func (w waits) add(o smcloop.WaitStats, minus bool) waits {
	f := func(x, y uint64) uint64 {
		if minus {
			return x - y
		}
		return x + y
	}
	return waits{
		Waits: f(w.Waits, o.Waits), SpinHits: f(w.SpinHits, o.SpinHits), SpinMisses: f(w.SpinMisses, o.SpinMisses),
		SpinSkips: f(w.SpinSkips, o.SpinSkips), FutexHits: f(w.FutexHits, o.FutexHits), FutexMisses: f(w.FutexMisses, o.FutexMisses),
		Deadlines: f(w.Deadlines, o.Deadlines), RecheckHits: f(w.RecheckHits, o.RecheckHits),
		LongSpins: f(w.LongSpins, o.LongSpins),
	}
}

// stats is w as a smcloop.WaitStats.
func (w waits) stats() smcloop.WaitStats { return smcloop.WaitStats(w) }
