package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Transport is one way of connecting two processes, on this host or, for a run with
// Config.ServerHost, on two hosts.
type Transport struct {
	// Name identifies the transport on the command line and to the server child:
	// "smcd", "smcd-busypoll", "tcp", "unix", ...
	Name string
	// Listen listens on a fresh address (tcp: 127.0.0.1:0, unix: a new temporary path).
	// Closing the listener releases the address.
	Listen func(ctx context.Context) (net.Listener, error)
	// Dial connects to addr, which is Listener.Addr().String() of a listener made by Listen
	// in another process.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// ListenOn, if set, listens on the given address instead of a fresh one, for a
	// server started on its own (Serve, "smcloop server --listen").
	ListenOn func(ctx context.Context, addr string) (net.Listener, error)

	// TwoHosts says the transport only works between two hosts (SMC-R): Run refuses it
	// unless its server children run on another host (Config.ServerHost).
	TwoHosts bool

	// The hooks below are optional; they serve transports that upgrade a TCP connection
	// after a handshake and may fall back to plain TCP.

	// Mode reports whether a connection made by Dial carries its bytes through shared
	// memory (smc true) or fell back to TCP, and describes its mode for messages.
	// Ping-pong and stream refuse a connection that fell back, so that TCP figures are
	// never posted under this transport's name; the connection modes count both kinds.
	// Nil: the transport has no fallback.
	Mode func(conn net.Conn) (smc bool, desc string)
	// ListenerStats reads the counters of a listener made by Listen. The server child of
	// the connection modes reports them.
	ListenerStats func(ln net.Listener) ListenerStats
	// Stall connects to addr like Dial's client would, announcing a handshake, and then
	// sends nothing, so that the server's handshake for it waits until it times out. The
	// overload mode holds many of these open. Nil: the overload mode stalls with Dial,
	// which for a transport without a handshake is simply an idle client.
	Stall func(ctx context.Context, addr string) (net.Conn, error)

	// The hooks below serve the HTTP mode and the send-path figures; they are optional.

	// Desc describes the transport's settings for the report's header ("1 MiB buffers,
	// autosplit off"); empty for none.
	Desc string
	// Cork sets or clears corking (TCP_CORK) on a connection made by Listen or Dial. The
	// HTTP mode's sendfile method corks around every response where it is set.
	Cork func(conn net.Conn, on bool) error
	// SendStats reads the send-path counters of a connection made by Listen or Dial; ok
	// is false if the connection has none (a fallback, say). Stream and ping-pong report
	// the client's, the HTTP mode the server's.
	SendStats func(conn net.Conn) (st SendStats, ok bool)

	// ZeroCopy, if set, moves the payload of ping-pong and stream through the
	// transport's own buffers, filled and verified in place, instead of Read and Write.
	ZeroCopy *ZeroCopy
}

// ErrFallback is matched (errors.Is) by the errors of a transport's I/O that left its own
// path in the middle of a measurement (shmipc-go moving a stream to its unix socket
// when its buffers run out, say). Such a measurement posts no figure: the round is
// recorded as fallen back, with the error, and the run goes on.
var ErrFallback = errors.New("the transport fell back")

// SendStats are the send-path counters of a connection, as smcloop's Conn.Stats reports
// them (after the kernel's smc_stats).
type SendStats struct {
	Conns  uint64 `json:"conns"`  // connections whose counters are summed here
	Writes uint64 `json:"writes"` // Write, WriteMore and ReadFrom calls
	Bytes  uint64 `json:"bytes"`  // application bytes sent
	Pushes uint64 `json:"pushes"` // producer-cursor publications
	// CorkPushes are the pushes made by clearing the cork (cork_cnt); SendfileCalls the
	// ReadFrom calls from a file (sendfile); Autocorked the writes held back by
	// autocorking; AutosplitSegments the segments published before their write ended;
	// WindowUpdates the consumer-cursor publications of the receiving side.
	CorkPushes        uint64 `json:"cork_pushes"`
	SendfileCalls     uint64 `json:"sendfile_calls"`
	Autocorked        uint64 `json:"autocorked"`
	AutosplitSegments uint64 `json:"autosplit_segments"`
	WindowUpdates     uint64 `json:"window_updates"`
	// Rings are the doorbells rung on the peer (a system call each), Sleeps the times
	// this side blocked on its own.
	Rings  uint64 `json:"rings"`
	Sleeps uint64 `json:"sleeps"`
	// DMB and PeerDMB are the receive buffer sizes of this side and of the peer (this
	// side's send ring), the largest seen over the connections summed.
	DMB     int `json:"dmb"`
	PeerDMB int `json:"peer_dmb"`
	// ReadWaits are this side's Reads that found no data and waited, by how each wait
	// ended: ReadSpinHits caught by the spin, ReadShortSleeps by a short sleep on the
	// wake word, ReadDoorbells asleep on the doorbell (smcloop's ConnStats.ReadWaits).
	ReadWaits       uint64 `json:"read_waits,omitempty"`
	ReadSpinHits    uint64 `json:"read_spin_hits,omitempty"`
	ReadShortSleeps uint64 `json:"read_short_sleeps,omitempty"`
	ReadDoorbells   uint64 `json:"read_doorbells,omitempty"`
}

// add sums counters and keeps the largest buffer sizes.
func (s *SendStats) add(o SendStats) {
	s.Conns += o.Conns
	s.Writes += o.Writes
	s.Bytes += o.Bytes
	s.Pushes += o.Pushes
	s.CorkPushes += o.CorkPushes
	s.SendfileCalls += o.SendfileCalls
	s.Autocorked += o.Autocorked
	s.AutosplitSegments += o.AutosplitSegments
	s.WindowUpdates += o.WindowUpdates
	s.Rings += o.Rings
	s.Sleeps += o.Sleeps
	s.ReadWaits += o.ReadWaits
	s.ReadSpinHits += o.ReadSpinHits
	s.ReadShortSleeps += o.ReadShortSleeps
	s.ReadDoorbells += o.ReadDoorbells
	s.DMB = max(s.DMB, o.DMB)
	s.PeerDMB = max(s.PeerDMB, o.PeerDMB)
}

// addSendStats adds o to *dst, allocating it on first use.
func addSendStats(dst **SendStats, o SendStats) {
	if *dst == nil {
		*dst = &SendStats{}
	}
	(*dst).add(o)
}

// ListenerStats are the counters of a listener that upgrades connections after a
// handshake, as smcloop's Listener.Stats reports them.
type ListenerStats struct {
	Accepted      uint64 `json:"accepted"`       // TCP connections taken from the kernel
	SMC           uint64 `json:"smc"`            // handshakes that ended in shared memory
	Fallback      uint64 `json:"fallback"`       // connections delivered as plain TCP
	HandshakeErrs uint64 `json:"handshake_errs"` // handshakes that failed: connection dropped
	Congested     uint64 `json:"congested"`      // times the handshakes became congested
	Withdrawn     uint64 `json:"withdrawn"`      // times the capability signal was withdrawn
	BacklogFull   uint64 `json:"backlog_full"`   // times accepting paused on a full backlog
	// PendingNow and HandshakingNow are gauges: connections in the backlog, and
	// handshakes queued or running, when the counters were read.
	PendingNow     int `json:"pending_now"`
	HandshakingNow int `json:"handshaking_now"`
}

// add sums counters; the gauges take o's values (the later reading).
func (s *ListenerStats) add(o ListenerStats) {
	s.Accepted += o.Accepted
	s.SMC += o.SMC
	s.Fallback += o.Fallback
	s.HandshakeErrs += o.HandshakeErrs
	s.Congested += o.Congested
	s.Withdrawn += o.Withdrawn
	s.BacklogFull += o.BacklogFull
	s.PendingNow, s.HandshakingNow = o.PendingNow, o.HandshakingNow
}

// DefaultTransports is the order in which the CLI benchmarks transports when none are
// named; only the registered ones take part (see Defaults).
var DefaultTransports = []string{"smcd", "smcd-zc", "smcd-nospin", "tcp", "unix"}

// DefaultConnTransports are the transports of the short-lived connection mode when none
// are named: smcloop with its defaults, with slowed server handshakes without and with
// handshake limitation, TCP with the CLC exchange's messages added (what the CLC round
// trips alone cost), and the baselines.
var DefaultConnTransports = []string{"smcd", "smcd-slowhs", "smcd-slowhs-limit", "tcp-clc", "tcp", "unix"}

// DefaultOverloadTransports are the servers of the overload mode when none are named:
// smcloop without and with handshake limitation, and TCP for reference. The overload
// mode needs transports that listen on a TCP address.
var DefaultOverloadTransports = []string{"smcd", "smcd-limit", "tcp"}

// DefaultHTTPServers are the servers of the HTTP mode when none are named:
// smcloop serving the file with sendfile and cork, smcloop with plain writes, and TCP
// with sendfile and cork, as nginx serves it.
var DefaultHTTPServers = []string{"smcd:sendfile", "smcd:write", "tcp:sendfile"}

// registry holds the process-wide set of transports known by name. The server child
// looks transports up here, so the client and the child must register the same set
// (they run the same binary).
var registry struct {
	mu     sync.Mutex
	byName map[string]Transport
}

// Register makes t known by t.Name. It panics if t has no name, a name with a comma or
// space, no Listen or Dial, or if the name is already registered: registration is done
// once at program start, like database/sql drivers.
func Register(t Transport) {
	if t.Name == "" || strings.ContainsAny(t.Name, ", \t\n") {
		panic(fmt.Sprintf("bench: Register: invalid transport name %q", t.Name))
	}
	if t.Listen == nil || t.Dial == nil {
		panic(fmt.Sprintf("bench: Register: transport %q needs both Listen and Dial", t.Name))
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if _, dup := registry.byName[t.Name]; dup {
		panic(fmt.Sprintf("bench: Register: transport %q registered twice", t.Name))
	}
	if registry.byName == nil {
		registry.byName = make(map[string]Transport)
	}
	registry.byName[t.Name] = t
}

// Registered returns the names of all registered transports, sorted.
func Registered() []string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	names := make([]string, 0, len(registry.byName))
	for name := range registry.byName {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Defaults returns the names in DefaultTransports that are registered, in that order.
func Defaults() []string { return Available(DefaultTransports) }

// Available returns the names that are registered, in their order.
func Available(names []string) []string {
	var out []string
	for _, name := range names {
		if _, err := Lookup(name); err == nil {
			out = append(out, name)
		}
	}
	return out
}

// Lookup returns the transport registered as name. The error for an unknown name lists
// the known ones.
func Lookup(name string) (Transport, error) {
	registry.mu.Lock()
	t, ok := registry.byName[name]
	registry.mu.Unlock()
	if !ok {
		return Transport{}, fmt.Errorf("unknown transport %q (known: %s)", name, strings.Join(Registered(), ", "))
	}
	return t, nil
}

// Resolve looks up every name, in order. It fails on the first unknown or repeated name.
func Resolve(names []string) ([]Transport, error) {
	if len(names) == 0 {
		return nil, errors.New("no transports given")
	}
	out := make([]Transport, 0, len(names))
	for i, name := range names {
		if slices.Contains(names[:i], name) {
			return nil, fmt.Errorf("transport %q listed twice", name)
		}
		t, err := Lookup(name)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

var builtinsOnce sync.Once

// RegisterBuiltins registers the baselines, TCP() as "tcp" and Unix() as "unix". It may
// be called more than once.
func RegisterBuiltins() {
	builtinsOnce.Do(func() {
		Register(TCP())
		Register(Unix())
	})
}

// TCP is Go's TCP over the loopback interface (127.0.0.1, Nagle off as Go sets by default).
// Its Cork hook sets TCP_CORK (Linux only).
func TCP() Transport {
	return Transport{
		Name: "tcp",
		Desc: "Go TCP over 127.0.0.1 (between two hosts: to the bench host's address), kernel defaults",
		Cork: tcpCork,
		Listen: func(ctx context.Context) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(ctx, "tcp", "127.0.0.1:0")
		},
		ListenOn: func(ctx context.Context, addr string) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(ctx, "tcp", addr)
		},
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
	}
}

// Unix is Go's unix stream socket on a path in a fresh temporary directory; closing the
// listener removes both.
func Unix() Transport {
	return Transport{
		Name: "unix",
		Desc: "Go unix stream socket",
		Listen: func(ctx context.Context) (net.Listener, error) {
			return ListenTempUnix(ctx, "smcloop-bench-")
		},
		ListenOn: func(ctx context.Context, addr string) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(ctx, "unix", addr)
		},
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		},
	}
}

// ListenTempUnix listens on a unix socket in a fresh temporary directory (named with
// prefix); closing the listener removes the directory.
func ListenTempUnix(ctx context.Context, prefix string) (net.Listener, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", filepath.Join(dir, "s"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &tempDirListener{Listener: ln, dir: dir}, nil
}

// tempDirListener removes the directory holding its socket when it is closed.
type tempDirListener struct {
	net.Listener
	dir  string
	once sync.Once
}

func (l *tempDirListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() {
		if rerr := os.RemoveAll(l.dir); err == nil {
			err = rerr
		}
	})
	return err
}
