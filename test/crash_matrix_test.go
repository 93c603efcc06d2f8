package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/smcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The crash matrix: one side of a connection, in a process of its own, is SIGKILLed at
// a random or a chosen point of the CLC handshake or of the transfer, and this process,
// the survivor, must see its calls fail within killBound of the kill and must keep no
// descriptor, goroutine, DMB memfd or mapping for the dead peer once it has closed what
// it holds.
//
// The points of the handshake are reached from outside the library. A random point is
// a kill at a random delay after the victim starts its part. A chosen point is a stall:
// a client's TCP socket gets an SO_RCVLOWAT larger than any CLC message, so that once
// its Dial, having sent the Proposal, waits for the Accept, the Go poller never reports
// the socket readable and the client stops right before reading the Accept, which stays
// queued; this process watches the socket's receive queue in /proc/net/tcp and kills
// the client once the Accept is there. (A read that finds data returns it whatever
// SO_RCVLOWAT says, so a client that reaches its read only after the Accept arrived
// goes through: its Dial returns, it reports that and exits, and the stall is tried
// again. A listener's SO_RCVLOWAT is not inherited by the sockets it accepts, and a
// server reads the Proposal only after it arrived, so servers are not stalled this way.)

// crashPeerEnv starts the test binary as the peer process of TestCrashMatrix and
// TestDeviceSocketLeak (see TestCrashPeerProcess): its value is the role and its
// arguments, separated by spaces.
const crashPeerEnv = "SMCLOOP_TEST_CRASH_PEER"

// crashSettle bounds how long the survivor may take to release what it held for a dead
// peer, once it has closed its connections. A buffer that nothing but the idle sweep
// releases takes up to two sweeps; everything else goes at once. A watchdog, not a
// requirement.
const crashSettle = 2*smcd.IdleSweep + settleTimeout

// stallLowat is the SO_RCVLOWAT that stalls a socket before any CLC message.
const stallLowat = 1 << 20

// stallTries bounds the attempts at a stall (see above).
const stallTries = 10

// TestCrashPeerProcess is not a test: it is the peer process of TestCrashMatrix and
// TestDeviceSocketLeak, started by startCrashPeer.
func TestCrashPeerProcess(t *testing.T) {
	spec, ok := testEnv[crashPeerEnv]
	if !ok {
		t.Skip("peer process of TestCrashMatrix; runs only when started by it")
	}
	if err := runCrashPeer(strings.Fields(spec)); err != nil {
		fmt.Fprintf(os.Stderr, "crash peer %q: %v\n", spec, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// startCrashPeer starts a crash peer process with args (see runCrashPeer). Like the
// peers of startPeer it speaks in lines on stdout, exits when its stdin closes, and is
// killed (if still running) and waited for when the test ends.
func startCrashPeer(t *testing.T, args ...string) *peer {
	t.Helper()
	return startProcess(t, "crash "+args[0], []string{"-test.run=^TestCrashPeerProcess$", "-test.count=1"},
		crashPeerEnv+"="+strings.Join(args, " "))
}

// runCrashPeer plays one side of a connection until it is killed:
//
//	client ADDR MODE SEED  dial ADDR; MODE is
//	                       dial:  print "DIAL" just before dialing, then echoClient
//	                       stall: dial with SO_RCVLOWAT stallLowat: stop before reading
//	                              the server's Accept (if Dial returns, the stall
//	                              missed: print "MISSED" and exit)
//	                       idle:  print "UP <mode> <Dial's nanoseconds>" once
//	                              connected, then wait
//	                       echo:  the same, then echoClient
//	server                 listen, print "ADDR <addr>", then echoServe every
//	                       connection, printing "UP <mode>" as each starts
//
// It exits when its stdin closes, so that it never outlives the test process.
func runCrashPeer(args []string) error {
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(2)
	}()
	ctx := context.Background()
	switch {
	case len(args) == 4 && args[0] == "client":
		addr, mode := args[1], args[2]
		seed, err := strconv.ParseUint(args[3], 10, 64)
		if err != nil {
			return err
		}
		var d smcloop.Dialer
		if mode == "stall" {
			d.NetDialer.ControlContext = func(_ context.Context, _, _ string, rc syscall.RawConn) error {
				return setRcvLowat(rc, stallLowat)
			}
		}
		if mode == "dial" {
			say("DIAL")
		}
		start := time.Now()
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		if mode == "stall" {
			say("MISSED %s", c.Mode())
			c.Close()
			return nil
		}
		c.SetDeadline(time.Now().Add(peerWatchdog))
		say("UP %s %d", c.Mode(), time.Since(start))
		if mode == "idle" {
			select {}
		}
		return echoClient(c, seed)
	case len(args) == 1 && args[0] == "server":
		ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		say("ADDR %s", ln.Addr())
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return err
			}
			go func() {
				c.SetDeadline(time.Now().Add(peerWatchdog))
				say("UP %s", c.Mode())
				echoServe(c)
			}()
		}
	}
	return fmt.Errorf("want client ADDR MODE SEED or server, got %q", args)
}

func setRcvLowat(rc syscall.RawConn, n int) error {
	var err error
	if cerr := rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n) }); cerr != nil {
		return cerr
	}
	return os.NewSyscallError("setsockopt SO_RCVLOWAT", err)
}

// echoMax bounds one echoClient write: far below a DMB ring, so that the echo of a
// write fits in the writer's ring while it has not started reading.
const echoMax = 8 << 10

// echoClient writes random-sized pieces of a seeded payload and reads each back, until
// an error.
func echoClient(c net.Conn, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x6563686f))
	data := payload(seed, echoMax)
	got := make([]byte, echoMax)
	for {
		n := 1 + rng.IntN(echoMax)
		if _, err := c.Write(data[:n]); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, got[:n]); err != nil {
			return err
		}
		if !bytes.Equal(got[:n], data[:n]) {
			return errors.New("echo differs from what was sent")
		}
	}
}

// echoServe writes back what it reads until an error (io.EOF included).
func echoServe(c net.Conn) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}

// TCP states as /proc/net/tcp writes them.
const (
	tcpEstablished = 0x01
	tcpListen      = 0x0A
)

// tcpRecvQueue returns the receive queue of the IPv4 TCP sockets in state st whose local
// port is local and remote port remote (0: any), from /proc/net/tcp: unread bytes for an
// established socket, connections waiting for accept for a listening one. It sums over
// the matching sockets and reports how many matched.
func tcpRecvQueue(st, local, remote int) (queued, sockets int, err error) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, 0, err
	}
	port := func(hexAddr string) int {
		_, p, _ := strings.Cut(hexAddr, ":")
		n, _ := strconv.ParseUint(p, 16, 16)
		return int(n)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] == "sl" {
			continue
		}
		s, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil || int(s) != st || port(f[1]) != local && local != 0 || port(f[2]) != remote && remote != 0 {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseUint(rx, 16, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/net/tcp line %q: %v", strings.TrimSpace(line), err)
		}
		queued += int(n)
		sockets++
	}
	return queued, sockets, nil
}

// stallClient starts a client peer process that stalls before reading the Accept of
// the server at addr (local port port), and returns it once the Accept is queued in its
// socket: the server's handshake then waits for the Confirm. A start whose stall
// missed (see above) is tried again; missed counts those, each of which made a
// connection the server delivered.
func stallClient(t *testing.T, addr string, port, acceptLen int, seed uint64) (p *peer, missed int) {
	t.Helper()
	for range stallTries {
		p := startCrashPeer(t, "client", addr, "stall", strconv.FormatUint(seed, 10))
		stalled := false
		waitUntil(t, watchdog, "the Accept queued in a stalled client's socket", func() bool {
			q, socks, err := tcpRecvQueue(tcpEstablished, 0, port)
			require.NoError(t, err)
			if socks == 1 && q >= acceptLen {
				stalled = true
				return true
			}
			select {
			case <-p.exited:
				return true
			default:
				return false
			}
		})
		// The Accept was seen queued, but the client may still be about to read it: a
		// stall that misses can be caught in that moment (TestDeviceSocketLeak then found
		// its victim gone when it killed it). Stop the client and look again: a stopped
		// client reads nothing, so an Accept still queued stays unread.
		if stalled && stopped(t, p) {
			q, socks, err := tcpRecvQueue(tcpEstablished, 0, port)
			require.NoError(t, err)
			if socks == 1 && q >= acceptLen {
				return p, missed
			}
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
		}
		line, ok := <-p.lines
		for range p.lines {
		}
		select { // a client caught by the second look may not have exited yet
		case <-p.exited:
		case <-time.After(watchdog):
			t.Fatalf("a stalled client that missed its stall did not exit within %v", watchdog)
		}
		require.True(t, ok && strings.HasPrefix(line, "MISSED"),
			"stalled client exited (%v) without reporting a missed stall; it said %q", p.waitErr, line)
		missed++
		t.Logf("stall missed: the client read the Accept before it slept; trying again")
	}
	t.Fatalf("no stall in %d tries", stallTries)
	return nil, missed
}

// stopped stops the peer's process (SIGSTOP) and reports, once the kernel shows it
// stopped, true; false if it exited first.
func stopped(t *testing.T, p *peer) bool {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		require.ErrorIs(t, err, os.ErrProcessDone, "stopping the %s peer", p.role)
		return false
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	var state byte
	waitUntil(t, watchdog, "the stopped client's state", func() bool {
		b, err := os.ReadFile(stat)
		if err != nil { // reaped
			state = 'X'
			return true
		}
		// pid (comm) state ...: comm may hold spaces and parentheses, the state follows
		// the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			state = b[i+2]
		}
		return state == 'T' || state == 't' || state == 'Z' || state == 'X'
	})
	return state == 'T' || state == 't'
}

// clcLengths are the lengths of the CLC messages of a first-contact SMC-D v2 handshake
// as smcloop sends them (one UEID, one Emulated-ISM device, the first-contact
// extension in Accept and Confirm).
func clcLengths(t *testing.T) (proposal, accept, confirm int) {
	t.Helper()
	prop := &clc.Proposal{
		Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathD, Release: clc.Release1,
		UEIDs: [][clc.EIDLen]byte{{}}, FeatureMask: clc.FeatureEmulatedISM,
	}
	prop.AddISMDevice(1, 2, 0xFFFF)
	p, err := prop.Append(nil)
	require.NoError(t, err)
	ac := &clc.AcceptConfirm{
		Type: clc.TypeAccept, Version: clc.V2, FirstContact: true, CHID: 0xFFFF,
		FCE: &clc.FirstContactExt{OSType: clc.OSLinux, Release: clc.Release1, FeatureMask: clc.FeatureEmulatedISM},
	}
	a, err := ac.Append(nil)
	require.NoError(t, err)
	ac.Type = clc.TypeConfirm
	c, err := ac.Append(nil)
	require.NoError(t, err)
	return len(p), len(a), len(c)
}

// crashSpan is the span of the random kill points of a transfer.
const crashSpan = 20 * time.Millisecond

// crashCase is one row of the matrix: which process is killed, and where.
type crashCase struct {
	victim string // "client" or "server"
	mode   string // see killClient and killServer
	iters  int    // with -short; three times as many without
}

var crashCases = []crashCase{
	// Random points of the handshake (and, past its end, of the first echoes).
	{"client", "dial", 30},
	{"server", "dial", 30},
	// Chosen points of the handshake.
	{"client", "stall", 8}, // client stopped before reading the Accept
	{"client", "idle", 4},  // connected; the survivor's Read asleep
	{"server", "idle", 4},
	// Random points of a transfer.
	{"client", "echo", 15},
	{"server", "echo", 15},
}

// crashOutcome is what one iteration saw.
type crashOutcome struct {
	killed time.Time // just before SIGKILL
	failed time.Time // the survivor's first failure; zero if no connection reached it
	what   string    // which call failed, and with what
}

// crashMatrix is the survivor's state: this process.
type crashMatrix struct {
	rng *rand.Rand
	// First-contact Dials, measured here and by client peers: the span of the
	// random kill points of a handshake.
	hs, clientHs time.Duration
	accLen       int
	base         resources
	baseG        int
	settleMax    time.Duration

	// The server side, for client victims: every accepted connection is echoed.
	ln        *smcloop.Listener
	addr      string
	port      int
	delivered chan *smcloop.Conn
	ends      chan connEnd
}

// connEnd is the end of an accepted connection's echo.
type connEnd struct {
	at   time.Time
	mode string
	err  error
}

// TestCrashMatrix kills the client or the server process at random and at chosen
// points of the handshake and of the transfer. This process, the other side, must see
// its calls fail (or its handshake abandoned) within killBound of the kill, none before
// it, and must come back to its baseline of descriptors, DMB memfds and mappings, and
// goroutines once it has closed its connections.
func TestCrashMatrix(t *testing.T) {
	seed := testSeed(t)
	m := &crashMatrix{rng: rand.New(rand.NewPCG(seed, 0x637261736800))}
	_, m.accLen, _ = clcLengths(t)
	m.listen(t)

	// Warm-up, one victim of each side: what this process keeps for its life (its
	// device and watchers) exists before the baseline, and a first-contact handshake
	// is timed for the random kill points.
	terminated0 := smcloop.ProcessStatistics().Buffers.Terminated
	m.hs, m.clientHs = time.Hour, time.Hour
	m.killServer(t, "echo")
	m.killClient(t, "idle")
	waitUntil(t, settleTimeout, "the warm-up link groups terminated", func() bool {
		return smcloop.ProcessStatistics().Buffers.Terminated >= terminated0+2
	})
	m.base, m.baseG = measure(t, 0), runtime.NumGoroutine()
	t.Logf("first-contact Dial %v here, %v in a client peer; baseline %+v, %d goroutines", m.hs, m.clientHs, m.base, m.baseG)

	var order []crashCase
	for _, c := range crashCases {
		n := c.iters
		if !testing.Short() {
			n *= 3
		}
		for range n {
			order = append(order, c)
		}
	}
	m.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	type row struct {
		n, reached int
		max        time.Duration
		whats      map[string]int
	}
	rows := map[crashCase]*row{}
	var worst time.Duration
	for i, c := range order {
		var o crashOutcome
		if c.victim == "client" {
			o = m.killClient(t, c.mode)
		} else {
			o = m.killServer(t, c.mode)
		}
		r := rows[c]
		if r == nil {
			r = &row{whats: map[string]int{}}
			rows[c] = r
		}
		r.n++
		what := "no connection reached the survivor"
		if !o.failed.IsZero() {
			took := o.failed.Sub(o.killed)
			r.reached++
			r.max = max(r.max, took)
			worst = max(worst, took)
			what, _, _ = strings.Cut(o.what, ":")
			if took > killBound {
				t.Errorf("iteration %d, %s killed (%s): the survivor failed %v after the kill, want within %v: %s",
					i, c.victim, c.mode, took, killBound, o.what)
			}
		}
		r.whats[what]++
		m.settle(t, fmt.Sprintf("iteration %d, %s killed (%s)", i, c.victim, c.mode))
		if t.Failed() {
			t.FailNow()
		}
	}
	for _, c := range crashCases {
		r := rows[c]
		t.Logf("%-6s killed, %-14s %3d times, %3d reached the survivor, max kill→failure %8v; %v",
			c.victim, c.mode, r.n, r.reached, r.max.Round(time.Microsecond), r.whats)
	}
	t.Logf("%d kills; max kill→failure %v; max settle %v", len(order), worst.Round(time.Microsecond), m.settleMax.Round(time.Microsecond))
}

// listen starts the survivor's server side.
func (m *crashMatrix) listen(t *testing.T) {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	m.ln, m.addr, m.port = ln, ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port
	m.delivered = make(chan *smcloop.Conn, 64)
	m.ends = make(chan connEnd, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			m.delivered <- c
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.SetDeadline(time.Now().Add(watchdog))
				err := echoServe(c)
				m.ends <- connEnd{time.Now(), c.Mode(), err}
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
}

// delay returns a random duration in [0, span].
func (m *crashMatrix) delay(span time.Duration) time.Duration {
	return time.Duration(m.rng.Int64N(int64(span) + 1))
}

// killClient runs a client peer process against the survivor's listener and kills it:
//
//	dial:  at a random point from just before its Dial to past the handshake's length
//	stall: stopped before reading the Accept, which is queued in its socket (the
//	       survivor's handshake waits for the Confirm)
//	idle:  connected, while the survivor's Read is asleep
//	echo:  at a random point of an echo exchange
//
// It returns when every connection the victim made has ended at the survivor.
func (m *crashMatrix) killClient(t *testing.T, mode string) crashOutcome {
	t.Helper()
	var p *peer
	seed := m.rng.Uint64()
	var st0 smcloop.ListenerStats
	if mode == "stall" {
		pre := m.ln.Stats()
		var missed int
		p, missed = stallClient(t, m.addr, m.port, m.accLen, seed)
		// A missed stall's client finished its Dial and exited: the survivor either
		// delivered that connection, whose echo then ends with the client, or failed its
		// handshake. Those outcomes are that attempt's, not this victim's: wait for them
		// and take the ends of the delivered ones out of the way.
		if missed > 0 {
			var st smcloop.ListenerStats
			waitUntil(t, watchdog, "the missed stalls' handshakes ended at the survivor", func() bool {
				st = m.ln.Stats()
				return st.SMC+st.Fallback+st.HandshakeErrs-pre.SMC-pre.Fallback-pre.HandshakeErrs >= uint64(missed)
			})
			for range st.SMC + st.Fallback - pre.SMC - pre.Fallback {
				select {
				case <-m.delivered:
				case <-time.After(watchdog):
					t.Fatalf("a missed stall's connection was not delivered within %v", watchdog)
				}
				select {
				case <-m.ends:
				case <-time.After(watchdog):
					t.Fatalf("a missed stall's connection did not end at the survivor within %v", watchdog)
				}
			}
		}
		st0 = m.ln.Stats() // after any missed stall, whose connection is gone
	} else {
		// Before the peer starts: a client that connects before this look (a loaded
		// host) would be counted in st0, and its echo's end would never match a
		// delivered connection.
		st0 = m.ln.Stats()
		p = startCrashPeer(t, "client", m.addr, mode, strconv.FormatUint(seed, 10))
	}
	switch mode {
	case "dial":
		p.expect("DIAL")
		time.Sleep(m.delay(m.clientHs * 3 / 2)) // the kill point, not a synchronisation
	case "idle", "echo":
		if f := strings.Fields(p.expect("UP")); len(f) == 2 {
			if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				m.clientHs = min(m.clientHs, time.Duration(ns))
			}
		}
		var c *smcloop.Conn
		select {
		case c = <-m.delivered:
		case <-time.After(watchdog):
			t.Fatalf("the survivor got no connection for a connected client within %v", watchdog)
		}
		if mode == "echo" {
			time.Sleep(m.delay(crashSpan))
			break
		}
		require.True(t, c.UsingSMC(), "idle client's connection is not SMC-D: %s", c.Mode())
		waitUntil(t, watchdog, "the survivor's Read asleep", func() bool { return c.Stats().Sleeps > 0 })
	}
	atKill := m.ln.Stats()
	o := crashOutcome{killed: p.kill()}
	require.Equal(t, st0.HandshakeErrs, atKill.HandshakeErrs, "server handshakes failed before the client was killed")
	p.wait()
	for range p.lines { // the reader is done once the lines are
	}

	// Watch the survivor until everything the victim started has ended: nothing left in
	// the kernel's accept queue or the listener's, no handshake running, and the echo of
	// every connection delivered ended.
	var hsErrAt time.Time
	ended := 0
	end := time.Now().Add(watchdog)
	for {
		for more := true; more; {
			select {
			case e := <-m.ends:
				ended++
				assert.False(t, e.at.Before(o.killed), "the survivor's echo over %s ended before the kill: %v", e.mode, e.err)
				if o.failed.IsZero() || e.at.Before(o.failed) {
					o.failed, o.what = e.at, fmt.Sprintf("echo over accepted %s: %v", e.mode, e.err)
				}
			case <-m.delivered:
			default:
				more = false
			}
		}
		st := m.ln.Stats()
		if hsErrAt.IsZero() && st.HandshakeErrs > st0.HandshakeErrs {
			hsErrAt = time.Now()
		}
		backlog, _, err := tcpRecvQueue(tcpListen, m.port, 0)
		require.NoError(t, err)
		delivered := st.SMC + st.Fallback - st0.SMC - st0.Fallback
		if backlog == 0 && st.PendingNow == 0 && st.HandshakingNow == 0 && uint64(ended) == delivered {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("survivor not done with a dead client within %v: %+v, kernel backlog %d, %d of %d delivered connections ended",
				watchdog, st, backlog, ended, delivered)
		}
		time.Sleep(time.Millisecond)
	}
	if !hsErrAt.IsZero() && (o.failed.IsZero() || hsErrAt.Before(o.failed)) {
		o.failed, o.what = hsErrAt, "server handshake abandoned"
	}
	return o
}

// killServer runs a server peer process, dials it from the survivor and kills it:
//
//	dial: at a random point from just before the Dial to past the handshake's length
//	idle: connected, while the survivor's Read is asleep
//	echo: at a random point of an echo exchange
func (m *crashMatrix) killServer(t *testing.T, mode string) crashOutcome {
	t.Helper()
	p := startCrashPeer(t, "server")
	addr := p.addr()
	seed := m.rng.Uint64()
	var o crashOutcome
	fail := func(at time.Time, what string, err error) {
		if o.failed.IsZero() {
			o.failed, o.what = at, fmt.Sprintf("%s: %v", what, err)
		}
	}
	// echo runs an echo exchange over c until it fails, then closes c.
	echo := func(c *smcloop.Conn) {
		c.SetDeadline(time.Now().Add(watchdog))
		err := echoClient(c, seed)
		fail(time.Now(), "echo over "+c.Mode(), err)
		c.Close()
	}
	if mode == "dial" {
		killed := make(chan time.Time, 1)
		start := time.Now()
		time.AfterFunc(m.delay(m.hs*3/2), func() {
			at := time.Now()
			p.cmd.Process.Kill()
			killed <- at
		})
		c, err := smcloop.Dial("tcp", addr)
		if err != nil {
			var he *smcloop.HandshakeError
			if errors.As(err, &he) {
				fail(time.Now(), "Dial failed while "+he.Step, err)
			} else {
				fail(time.Now(), "Dial", err)
			}
		} else {
			m.hs = min(m.hs, time.Since(start))
			echo(c) // until the kill
		}
		select {
		case o.killed = <-killed:
		case <-time.After(watchdog):
			t.Fatalf("the kill did not come within %v", watchdog)
		}
		assert.False(t, o.failed.Before(o.killed), "the survivor failed before the kill: %s", o.what)
		p.wait()
		for range p.lines {
		}
		return o
	}

	start := time.Now()
	c, err := smcloop.Dial("tcp", addr)
	require.NoError(t, err, "Dial")
	m.hs = min(m.hs, time.Since(start))
	require.True(t, c.UsingSMC(), "connection is not SMC-D: %s", c.Mode())
	switch mode {
	case "echo":
		done := make(chan struct{})
		go func() {
			defer close(done)
			echo(c)
		}()
		time.Sleep(m.delay(crashSpan)) // the kill point, not a synchronisation
		o.killed = p.kill()
		<-done
	case "idle":
		var b [64]byte
		pending := goRead(c, b[:])
		waitAsleep(t, c, 0, pending)
		o.killed = p.kill()
		r := await(t, "Read on a killed server", pending)
		assert.Error(t, r.err, "Read on a killed server returned %d bytes", r.n)
		fail(r.at, "Read over "+c.Mode(), r.err)
		c.Close()
	}
	p.wait()
	for range p.lines {
	}
	return o
}

// settle requires this process to come back to its baseline within crashSettle.
func (m *crashMatrix) settle(t *testing.T, after string) {
	t.Helper()
	start := time.Now()
	for {
		now, g := measure(t, 0), runtime.NumGoroutine()
		if flat(m.base, now) && g <= m.baseG {
			m.settleMax = max(m.settleMax, time.Since(start))
			return
		}
		if time.Since(start) > crashSettle {
			buf := make([]byte, 1<<20)
			t.Fatalf("survivor after %s: %+v and %d goroutines %v later; baseline %+v and %d goroutines (fd slack %d)\n%s",
				after, now, g, crashSettle, m.base, m.baseG, fdSlack, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}
