package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/internal/asnobody"
	"github.com/smcloop/smcloop/internal/introspect"
)

// The CLI tests run the commands in this process (newApp's Run with captured output)
// against smcloop processes started from this test binary (TestCLIChild with a role in
// cliRoleEnv; not SMCLOOP_*, which smcloop refuses as unknown settings).

const (
	cliRoleEnv = "CLITEST_ROLE"
	cliArgsEnv = "CLITEST_ARGS"
	linePrefix = "CLITEST "
	// watchdog bounds every wait on a child; generous for a loaded machine.
	watchdog = 2 * time.Minute
)

// run runs the smcloop command line args in this process and returns its output.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	err = app.RunContext(ctx, append([]string{"smcloop"}, args...))
	return out.String(), errOut.String(), err
}

// child is a process started from this test binary in a role.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startChild(t *testing.T, cmd *exec.Cmd, role string, args ...string) *child {
	t.Helper()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, cliRoleEnv+"="+role, cliArgsEnv+"="+strings.Join(args, " "))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, stdin: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), linePrefix); ok {
				c.lines <- l
			}
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return c
}

// expect returns the rest of the child's next line, which must start with prefix.
func (c *child) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		require.True(t, ok, "child exited while %q was expected", prefix)
		rest, ok := strings.CutPrefix(l, prefix+" ")
		require.True(t, ok, "child said %q, want %q", l, prefix+" ...")
		return rest
	case <-time.After(watchdog):
		t.Fatalf("child: no %q line within %v", prefix, watchdog)
		return ""
	}
}

// peerReport is what the peer child tells of its connections.
type peerReport struct {
	L1, L2, Plain          string // listeners: SMC-D, SMC-D disabled, plain TCP
	A, B, C                string // local addresses of the connections dialed to them
	RMBSize, PeerRMBSize   int    // of A's client side
	SRMBSize, SPeerRMBSize int    // of A's server side
}

// TestCLIChild is the child side of the CLI tests.
func TestCLIChild(t *testing.T) {
	role := os.Getenv(cliRoleEnv)
	if role == "" {
		t.Skip("child role of the CLI tests")
	}
	args := strings.Fields(os.Getenv(cliArgsEnv))
	var err error
	switch role {
	case "peer":
		err = peerChild()
	case "nobody":
		err = nobodyChild(args)
	case "main":
		os.Args = append([]string{"smcloop"}, args...)
		main()     // exits 1 on an error
		os.Exit(0) // not the test's PASS
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	require.NoError(t, err)
}

func say(format string, a ...any) { fmt.Printf(linePrefix+format+"\n", a...) }

// peerChild opens an SMC-D connection (A), one declined by a listener with SMC-D off
// (B) and one to a plain TCP listener (C), moves known bytes on A and B, reports, and
// keeps everything open until its stdin ends.
func peerChild() error {
	l1, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l1.Close()
	lc := smcloop.ListenConfig{Config: smcloop.Config{DisableSMC: true}}
	l2, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l2.Close()
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer plain.Close()
	pair := func(ln *smcloop.Listener) (*smcloop.Conn, *smcloop.Conn, error) {
		c, err := smcloop.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, nil, err
		}
		s, err := ln.AcceptSMC()
		return c, s, err
	}
	move := func(from, to *smcloop.Conn, n int) error {
		if _, err := from.Write(make([]byte, n)); err != nil {
			return err
		}
		_, err := io.ReadFull(to, make([]byte, n))
		return err
	}
	a, as, err := pair(l1)
	if err != nil {
		return err
	}
	defer a.Close()
	defer as.Close()
	if err := move(a, as, 1000); err != nil {
		return err
	}
	// The answer comes while a's Read waits for it: the process counts one read wait
	// (how it ends depends on how the threads meet).
	waited := func(from, to *smcloop.Conn, n int) error {
		done := make(chan error, 1)
		go func() {
			_, err := io.ReadFull(to, make([]byte, n))
			done <- err
		}()
		for end := time.Now().Add(watchdog); to.Stats().ReadWaits.Waits == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				return fmt.Errorf("the Read did not wait within %v", watchdog)
			}
		}
		if _, err := from.Write(make([]byte, n)); err != nil {
			return err
		}
		return <-done
	}
	if err := waited(as, a, 300); err != nil {
		return err
	}
	b, bs, err := pair(l2)
	if err != nil {
		return err
	}
	defer b.Close()
	defer bs.Close()
	if err := move(b, bs, 200); err != nil {
		return err
	}
	c, err := smcloop.Dial("tcp", plain.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	pc, err := plain.Accept()
	if err != nil {
		return err
	}
	defer pc.Close()
	st, sst := a.Stats(), as.Stats()
	rep, _ := json.Marshal(peerReport{
		L1: l1.Addr().String(), L2: l2.Addr().String(), Plain: plain.Addr().String(),
		A: a.LocalAddr().String(), B: b.LocalAddr().String(), C: c.LocalAddr().String(),
		RMBSize: st.RMBSize, PeerRMBSize: st.PeerRMBSize, SRMBSize: sst.RMBSize, SPeerRMBSize: sst.PeerRMBSize,
	})
	say("READY %s", rep)
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// nobodyChild runs as another user than the peer (args[0], its pid): it asks the peer
// directly, bypassing the client's own check, then runs ss and stats.
func nobodyChild(args []string) error {
	pid, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	for _, op := range []string{introspect.OpConns, introspect.OpReset} {
		c, uid, err := introspect.Dial(ctx, pid)
		if err != nil {
			return err
		}
		_, err = introspect.Ask(ctx, c, introspect.Request{Op: op})
		switch {
		case errors.Is(err, introspect.ErrDenied):
			say("ASK %s denied uid %d", op, uid)
		default:
			say("ASK %s answered: %v", op, err)
		}
	}
	for _, cmd := range [][]string{{"ss", "-a", "--json"}, {"stats", "--json"}, {"stats", "reset", "--json"}} {
		var out bytes.Buffer
		app := newApp()
		app.Writer, app.ErrWriter = &out, io.Discard
		if err := app.RunContext(ctx, append([]string{"smcloop"}, cmd...)); err != nil {
			return err
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, out.Bytes()); err != nil {
			return err
		}
		say("%s %s", strings.ToUpper(cmd[0]), compact.String())
	}
	return nil
}

// ssOut is `smcloop ss --json`.
type ssOut struct {
	Connections []introspect.Conn     `json:"connections"`
	Listeners   []introspect.Listener `json:"listeners"`
	NotShown    []notShown            `json:"not_shown"`
}

func ofPID[T any](items []T, pid int, pidOf func(T) int) []T {
	var out []T
	for _, it := range items {
		if pidOf(it) == pid {
			out = append(out, it)
		}
	}
	return out
}

func connPID(c introspect.Conn) int         { return c.PID }
func listenerPID(l introspect.Listener) int { return l.PID }

// TestSSAndStats: ss and stats show the connections, listeners and counters of another
// smcloop process exactly, in text and JSON; a reset zeroes its counters; and a process of
// another user is refused and sees none of them.
func TestSSAndStats(t *testing.T) {
	p := startChild(t, exec.Command(os.Args[0], "-test.run=^TestCLIChild$"), "peer")
	var rep peerReport
	require.NoError(t, json.Unmarshal([]byte(p.expect(t, "READY")), &rep))
	pid := p.cmd.Process.Pid

	// ss --json: exactly the five connections, and no listeners without -a.
	out, _, err := run(t, "ss", "--json")
	require.NoError(t, err)
	var ss ssOut
	require.NoError(t, json.Unmarshal([]byte(out), &ss))
	assert.Nil(t, ss.Listeners)
	smcd := func(side, local, peer string, rmb, peerRMB int, sent, recv uint64, cur introspect.Cursors) introspect.Conn {
		return introspect.Conn{PID: pid, Side: side, State: "ACTIVE", Mode: "SMCD", Local: local, Peer: peer,
			RMBSize: rmb, PeerRMBSize: peerRMB, Cursors: &cur, BytesSent: sent, BytesRecv: recv}
	}
	tcp := func(side, local, peer string, lr, pr uint32, lname, pname string, sent, recv uint64) introspect.Conn {
		return introspect.Conn{PID: pid, Side: side, State: "ACTIVE", Mode: "TCP", LocalReason: lr, PeerReason: pr,
			LocalReasonName: lname, PeerReasonName: pname, Local: local, Peer: peer, BytesSent: sent, BytesRecv: recv}
	}
	// The consumer cursors as published: the readers read without sleeping after their
	// bytes came, and publish nothing below the stale limit (flow.go).
	cur := func(rx, tx uint32) introspect.Cursors {
		return introspect.Cursors{RxProd: introspect.Cursor{Count: rx}, TxProd: introspect.Cursor{Count: tx}}
	}
	want := []introspect.Conn{
		smcd("client", rep.A, rep.L1, rep.RMBSize, rep.PeerRMBSize, 1000, 300, cur(300, 1000)),
		smcd("server", rep.L1, rep.A, rep.SRMBSize, rep.SPeerRMBSize, 300, 1000, cur(1000, 300)),
		tcp("client", rep.B, rep.L2, 0x05000000, 0x03030001, "PEERDECL", "NOSMCDDEV", 200, 0),
		tcp("server", rep.L2, rep.B, 0x03030001, 0, "NOSMCDDEV", "", 0, 200),
		tcp("client", rep.C, rep.Plain, 0x03010000, 0, "PEERNOSMC", "", 0, 0),
	}
	got := ofPID(ss.Connections, pid, connPID)
	for i := range got { // counters that depend on timing: checked for presence only
		assert.NotZero(t, got[i].Writes+got[i].Reads+got[i].CLCBytesSent+uint64(len(got[i].Mode)))
		got[i].CLCBytesSent, got[i].CLCBytesRecv, got[i].Writes, got[i].Reads = 0, 0, 0, 0
		got[i].RingsSent, got[i].RingsSuppressed = 0, 0
	}
	assert.ElementsMatch(t, want, got)

	// ss text: a header and one line per connection.
	out, _, err = run(t, "ss")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.NotEmpty(t, lines)
	assert.Equal(t, strings.Fields(strings.Join(connHeader, " ")), strings.Fields(lines[0]))
	pidS := strconv.Itoa(pid)
	var mine [][]string
	for _, l := range lines[1:] {
		if f := strings.Fields(l); f[len(f)-1] == pidS {
			mine = append(mine, f)
		}
	}
	sz := strconv.Itoa
	assert.ElementsMatch(t, [][]string{
		{"ACTIVE", "SMCD", rep.A, rep.L1, sz(rep.RMBSize), sz(rep.PeerRMBSize), "0:300", "0:0", "0:1000", "0:0", "1000", "300", pidS},
		{"ACTIVE", "SMCD", rep.L1, rep.A, sz(rep.SRMBSize), sz(rep.SPeerRMBSize), "0:1000", "0:0", "0:300", "0:0", "300", "1000", pidS},
		{"ACTIVE", "TCP", "0x05000000/0x03030001", rep.B, rep.L2, "-", "-", "-", "-", "-", "-", "200", "0", pidS},
		{"ACTIVE", "TCP", "0x03030001/0x00000000", rep.L2, rep.B, "-", "-", "-", "-", "-", "-", "0", "200", pidS},
		{"ACTIVE", "TCP", "0x03010000/0x00000000", rep.C, rep.Plain, "-", "-", "-", "-", "-", "-", "0", "0", pidS},
	}, mine)

	// ss -l: the two smcloop listeners, in JSON and text.
	out, _, err = run(t, "ss", "-l", "--json")
	require.NoError(t, err)
	ss = ssOut{}
	require.NoError(t, json.Unmarshal([]byte(out), &ss))
	assert.Nil(t, ss.Connections)
	ls := ofPID(ss.Listeners, pid, listenerPID)
	require.Len(t, ls, 2)
	for i := range ls {
		assert.LessOrEqual(t, ls[i].Stats.PendingNow, 1, "the accept loop holds at most one slot")
		ls[i].Stats.PendingNow = 0
	}
	assert.ElementsMatch(t, []introspect.Listener{
		{PID: pid, Addr: rep.L1, Stats: introspect.ListenerStats{Accepted: 1, SMC: 1, Advertising: true}},
		{PID: pid, Addr: rep.L2, Stats: introspect.ListenerStats{Accepted: 1, Fallback: 1, Advertising: true}},
	}, ls)
	out, _, err = run(t, "ss", "-l")
	require.NoError(t, err)
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	assert.Equal(t, strings.Fields(strings.Join(listenerHeader, " ")), strings.Fields(lines[0]))
	mine = nil
	for _, l := range lines[1:] {
		if f := strings.Fields(l); f[len(f)-1] == pidS {
			f[7] = "-" // Pending: see above
			mine = append(mine, f)
		}
	}
	assert.ElementsMatch(t, [][]string{
		{"LISTEN", rep.L1, "up", "1", "1", "0", "0", "-", "0", pidS},
		{"LISTEN", rep.L2, "up", "1", "0", "1", "0", "-", "0", pidS},
	}, mine)

	// ss -a: both tables.
	out, _, err = run(t, "ss", "-a")
	require.NoError(t, err)
	tables := strings.Split(out, "\n\n")
	require.Len(t, tables, 2)
	assert.True(t, strings.HasPrefix(tables[0], "State"))
	assert.Equal(t, strings.Fields(strings.Join(listenerHeader, " ")), strings.Fields(strings.SplitN(tables[1], "\n", 2)[0]))

	// stats --json: the peer's counters exactly.
	wantStats := introspect.Stats{
		ConnsNow: 5, ListenersNow: 2,
		ClientSMC: 1, ServerSMC: 1, ClientFallback: 2, ServerFallback: 1,
		Fallbacks: []introspect.Reason{
			{Code: 0x03010000, Name: "PEERNOSMC", Client: 1},
			{Code: 0x03030001, Name: "NOSMCDDEV", Server: 1},
			{Code: 0x05000000, Name: "PEERDECL", Client: 1},
		},
		TxBytes: 1300, RxBytes: 1300, TxCalls: 2, RxCalls: 2, TCPTxBytes: 200, TCPRxBytes: 200,
		TxSizes: introspect.Hist{2}, RxSizes: introspect.Hist{2},
		ReadWaits: introspect.Waits{Waits: 1},
	}
	wantStats.RMBSizes[introspect.Bucket(rep.RMBSize)]++
	wantStats.RMBSizes[introspect.Bucket(rep.SRMBSize)]++
	wantStats.PeerRMBSizes[introspect.Bucket(rep.PeerRMBSize)]++
	wantStats.PeerRMBSizes[introspect.Bucket(rep.SPeerRMBSize)]++
	peerStats := func(args ...string) (statsReport, introspect.Stats) {
		t.Helper()
		out, _, err := run(t, args...)
		require.NoError(t, err)
		var r statsReport
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		var found []introspect.Stats
		for _, ps := range r.Processes {
			if ps.Process.PID == pid {
				assert.Equal(t, 0, ps.Process.UID)
				found = append(found, ps.Stats)
			}
		}
		require.Len(t, found, 1, "the peer's stats")
		s := found[0]
		assert.GreaterOrEqual(t, r.Host.ConnsNow, s.ConnsNow)
		assert.GreaterOrEqual(t, r.Host.TxBytes, s.TxBytes)
		return r, s
	}
	// strip zeroes the counters whose values depend on how the two processes' threads
	// met (doorbells) or on buffers reused within the process.
	// So do the ways the one read wait could end, which are checked apart: exactly one
	// of them.
	strip := func(s introspect.Stats) introspect.Stats {
		s.RMBAlloc, s.RMBReuse, s.RMBDowngrade, s.PeerAttach, s.PeerReuse = 0, 0, 0, 0, 0
		s.RingsSent, s.RingsSuppressed = 0, 0
		w := s.ReadWaits
		assert.Equal(t, w.Waits, w.SpinHits+w.FutexHits+w.RecheckHits+w.Deadlines+s.DoorbellSleeps,
			"every read wait ended one way: %+v, %d doorbell sleeps", w, s.DoorbellSleeps)
		assert.LessOrEqual(t, w.LongSpins, w.SpinHits+w.SpinMisses, "long spins are spins")
		assert.LessOrEqual(t, w.FutexHits+w.FutexMisses, s.FutexSleeps, "futex outcomes are futex sleeps")
		assert.LessOrEqual(t, s.FutexWakes, s.FutexSleeps, "the process woke its own futex sleepers only")
		assert.Equal(t, s.WakeSamples > 0, s.WakeCostNs > 0, "a wake-up cost with its samples")
		s.ReadWaits = introspect.Waits{Waits: w.Waits}
		assert.InDelta(t, 0.5, s.SlowWakes, 0.5, "a share")
		s.DoorbellSleeps, s.FutexSleeps, s.FutexWakes, s.WakeCostNs, s.WakeSamples, s.SlowWakes = 0, 0, 0, 0, 0, 0
		s.StarvedSpins = 0 // as the host's load has it
		return s
	}
	_, s := peerStats("stats", "--json")
	assert.Equal(t, uint64(2), s.RMBAlloc+s.RMBReuse, "one local DMB per SMC-D side")
	assert.Equal(t, uint64(2), s.PeerAttach+s.PeerReuse, "one peer DMB per SMC-D side")
	assert.NotZero(t, s.RingsSent+s.RingsSuppressed)
	assert.Equal(t, wantStats, strip(s))

	// stats text: the sections and the peer's line.
	out, _, err = run(t, "stats")
	require.NoError(t, err)
	for _, l := range []string{"Total connections handled", "  SMC connections", "  TCP fallbacks",
		"    0x03010000 PEERNOSMC", "SMC-D data (bytes)", "Buffer full", "Bufs (local DMB)", "Reqs TX",
		"Special calls", "Doorbells rung", "Buffers allocated", "Waits", "  in all", "  spin hits",
		"    long spins", "  futex hits", "Doorbell sleeps", "Futex sleeps", "Wake-up cost", "Starved spins"} {
		assert.Contains(t, out, "\n"+l, "stats output")
	}
	var procLine []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == len(processHeader) && f[0] == pidS {
			procLine = f
		}
	}
	require.NotNil(t, procLine, "the peer's line in:\n%s", out)
	assert.Equal(t, []string{pidS, procLine[1], "5", "2", "3", "0", "1300", "1300", procLine[8]}, procLine)
	assert.Regexp(t, `^(-|\d+\.\dµs)$`, procLine[8], "the peer's wake-up cost")
	// The text sums the host's smcloop processes: the peer's one read wait is the total only
	// while no other is about (the test binaries of other packages run beside this one).
	if strings.Contains(out, "statistics of 1 processes (") {
		assert.Regexp(t, `\n  in all +1 +0\n`, out, "the read wait")
	} else {
		assert.Regexp(t, `\n  in all +[1-9]\d* +\d+\n`, out, "the read wait, among other processes'")
	}

	t.Run("OtherUser", func(t *testing.T) {
		n := startChild(t, asnobody.Command(t, "-test.run=^TestCLIChild$"), "nobody", pidS)
		assert.Equal(t, "conns denied uid 0", n.expect(t, "ASK"))
		assert.Equal(t, "reset denied uid 0", n.expect(t, "ASK"))
		var ss ssOut
		require.NoError(t, json.Unmarshal([]byte(n.expect(t, "SS")), &ss))
		assert.Equal(t, []introspect.Conn{}, ss.Connections, "connections of other users")
		assert.Equal(t, []introspect.Listener{}, ss.Listeners, "listeners of other users")
		assert.Contains(t, ss.NotShown, notShown{pid, "permission denied (the process belongs to uid 0)"})
		for _, name := range []string{"STATS", "STATS"} { // show, then reset
			var r statsReport
			require.NoError(t, json.Unmarshal([]byte(n.expect(t, name)), &r))
			assert.Equal(t, []processStats{}, r.Processes)
			assert.Contains(t, r.NotShown, notShown{pid, "permission denied (the process belongs to uid 0)"})
		}
		// The other user's reset changed nothing.
		_, s := peerStats("stats", "--json")
		assert.Equal(t, wantStats, strip(s))
	})

	// reset shows the counters, then zeroes them; the open connections stay.
	r, s := peerStats("stats", "reset", "--json")
	assert.True(t, r.Reset)
	assert.Equal(t, wantStats, strip(s))
	_, s = peerStats("stats", "--json")
	s.WakeCostNs, s.SlowWakes = 0, 0 // moving averages: a reset leaves them
	assert.Equal(t, introspect.Stats{ConnsNow: 5, ListenersNow: 2, Fallbacks: []introspect.Reason{
		{Code: 0x03010000, Name: "PEERNOSMC"}, {Code: 0x03030001, Name: "NOSMCDDEV"}, {Code: 0x05000000, Name: "PEERDECL"},
	}}, s)
}

// TestChk: chk reports SMC-D for an smcloop listener and the fallback with its codes for
// a plain TCP server, with exit status 0 and 1.
func TestChk(t *testing.T) {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer plain.Close()
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	smcAddr, plainAddr := ln.Addr().String(), plain.Addr().String()
	smcLine := `^` + regexp.QuoteMeta(smcAddr) + `: SMC-D \(SMC-Dv2\), local DMB [1-9][0-9]* bytes, peer DMB [1-9][0-9]* bytes\n$`
	plainOut := plainAddr + ": TCP fallback, not SMC-D\n" +
		"  local reason 0x03010000 PEERNOSMC  the server gave no SMC capability signal: no smcloop listener serves this address on this host, or LimitHandshake withdrew it\n" +
		"  peer  reason 0x00000000 -          the peer did not decline\n"

	out, _, err := run(t, "chk", smcAddr)
	require.NoError(t, err)
	assert.Regexp(t, smcLine, out)

	out, _, err = run(t, "chk", plainAddr)
	require.ErrorIs(t, err, errNoSMC)
	assert.Equal(t, plainAddr+": not using SMC-D (TCP 0x03010000/0x00000000 (PEERNOSMC/-))", err.Error())
	assert.Equal(t, plainOut, out)

	_, _, err = run(t, "chk")
	assert.Error(t, err)

	// The command itself, in another process: its output and exit status.
	for _, c := range []struct {
		addr   string
		status int
	}{{smcAddr, 0}, {plainAddr, 1}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCLIChild$")
		cmd.Env = append(os.Environ(), cliRoleEnv+"=main", cliArgsEnv+"=chk "+c.addr)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if c.status == 0 {
			require.NoError(t, err, "stderr: %s", stderr.String())
			assert.Regexp(t, smcLine, stdout.String())
			continue
		}
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, c.status, ee.ExitCode())
		assert.Equal(t, plainOut, stdout.String())
		assert.Equal(t, "smcloop: "+plainAddr+": not using SMC-D (TCP 0x03010000/0x00000000 (PEERNOSMC/-))\n", stderr.String())
	}
}

// TestIntrospectOff: a process started with SMCLOOP_INTROSPECT=0 has no endpoint, so ss
// does not find it at all.
func TestIntrospectOff(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCLIChild$")
	cmd.Env = append(os.Environ(), "SMCLOOP_INTROSPECT=0")
	p := startChild(t, cmd, "peer")
	p.expect(t, "READY")
	pid := p.cmd.Process.Pid
	pids, err := introspect.Discover()
	require.NoError(t, err)
	assert.NotContains(t, pids, pid)
	out, _, err := run(t, "ss", "-a", "--json")
	require.NoError(t, err)
	var ss ssOut
	require.NoError(t, json.Unmarshal([]byte(out), &ss))
	assert.Empty(t, ofPID(ss.Connections, pid, connPID))
	assert.Empty(t, ofPID(ss.Listeners, pid, listenerPID))
	for _, n := range ss.NotShown {
		assert.NotEqual(t, pid, n.PID)
	}
}

// TestChkUnix: chk dials a path as a unix socket.
func TestChkUnix(t *testing.T) {
	path := t.TempDir() + "/smc.sock"
	ln, err := smcloop.Listen("unix", path)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	out, _, err := run(t, "chk", path)
	require.NoError(t, err)
	assert.Regexp(t, `^`+regexp.QuoteMeta(path)+`: SMC-D \(SMC-Dv2\), local DMB [1-9][0-9]* bytes, peer DMB [1-9][0-9]* bytes\n$`, out)

	plain, err := net.Listen("unix", path+".plain")
	require.NoError(t, err)
	defer plain.Close()
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	out, _, err = run(t, "chk", path+".plain")
	require.ErrorIs(t, err, errNoSMC)
	assert.Contains(t, out, path+".plain: TCP fallback, not SMC-D\n  local reason 0x03010000 PEERNOSMC")
}
