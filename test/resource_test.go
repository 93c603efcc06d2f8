package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/clc"
)

// Resource exhaustion: a process that runs out of descriptors or DMBs in the middle of
// handshakes must fall back to TCP with the kernel's reason (MEM, MAX_DMB), never crash
// and never lose a connection. The limited process is a child (this test binary started
// again to run the same test's child half), so that its limits touch nothing else.

// resourceChildEnv carries a child's role and arguments: "<role> <arg>...".
const resourceChildEnv = "SMCLOOP_TEST_RESOURCE_CHILD"

// fdHeadroom is the fewest descriptors a limited child may open beyond those it holds
// when it sets its limit. An SMC-D connection keeps one descriptor on either side (its
// TCP socket: DMB memory comes in slabs of 64, which the warm-up connection's link group
// already has, and signals go through the link's one signal channel) and needs one more
// for a moment, the slab's memfd while it attaches the peer's DMB; so a child has room
// for a few SMC-D connections, then falls back.
const fdHeadroom = 2

// resourceDials is how many connections the tests make after the limit is set; well
// past what fdHeadroom allows for SMC-D.
const resourceDials = 16

// resourcePayload is what every connection echoes.
const resourcePayload = 64 << 10

// connReport is one connection as the side that made or accepted it saw it.
type connReport struct {
	SMC         bool
	Local, Peer uint32 // fallback reasons
	Bytes       int    // echoed correctly
	Err         string
}

func (r connReport) String() string {
	if r.SMC {
		return "SMCD"
	}
	return fmt.Sprintf("TCP %s/%s", clc.CodeName(r.Local), clc.CodeName(r.Peer))
}

// startChild starts this test binary again to run test's child half with role and args
// in resourceChildEnv. It speaks the peer line protocol (procs_test.go).
func startChild(t *testing.T, test string, role string, env ...string) *peer {
	t.Helper()
	return startProcess(t, role+" child", []string{"-test.run=^" + test + "$", "-test.count=1"},
		append([]string{resourceChildEnv + "=" + role}, env...)...)
}

// startWarmServer starts test's "serve" child with env and makes one SMC-D connection to
// it, echoed, so that what a client makes once (the link to the listener, the devices'
// connections, the link group) exists before the test limits the server. The connection
// is returned open, with the server's address.
func startWarmServer(t *testing.T, test string, env ...string) (*peer, string, *smcloop.Conn) {
	t.Helper()
	p := startChild(t, test, "serve", env...)
	addr := p.addr()
	c, err := smcloop.Dial("tcp", addr)
	require.NoError(t, err)
	require.True(t, c.UsingSMC())
	require.Empty(t, echoCheck(c, 1).Err)
	p.expect("CONN")
	return p, addr, c
}

// dialServed dials the "serve" child p at addr n times, echoes a fresh payload on each
// connection, waits for the server's report of it and keeps it open in *keep.
func dialServed(t *testing.T, p *peer, addr string, n int, keep *[]*smcloop.Conn) []connReport {
	t.Helper()
	var rs []connReport
	for i := range n {
		c, err := smcloop.Dial("tcp", addr)
		require.NoError(t, err, "dial %d (has the server died? see its stderr)", i)
		rs = append(rs, echoCheck(c, uint64(100+i)))
		p.expect("CONN")
		*keep = append(*keep, c)
	}
	return rs
}

// fdTargets lists the open descriptors of process pid and what they are, for failure
// messages.
func fdTargets(pid int) string {
	dir := procDir(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join(dir, e.Name()))
		fmt.Fprintf(&b, "%s -> %s\n", e.Name(), l)
	}
	return b.String()
}

// closeAll closes every connection in *cs (a pointer, so that a deferred call sees
// the connections appended after it was deferred).
func closeAll(cs *[]*smcloop.Conn) {
	for _, c := range *cs {
		c.Close()
	}
}

// childRole returns the role and arguments of a child started by startChild, or false
// in the test process itself.
func childRole() (string, []string, bool) {
	v, ok := testEnv[resourceChildEnv]
	if !ok {
		return "", nil, false
	}
	f := strings.Fields(v)
	if len(f) == 0 {
		return "", nil, false
	}
	return f[0], f[1:], true
}

// limitFDs lets this process open at most headroom descriptors more than it holds now.
func limitFDs(headroom int) error {
	n, err := countFDs(0)
	if err != nil {
		return err
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	// Descriptors are numbered from 0 and the limit bounds the numbers: the lowest free
	// ones are used first, so this leaves headroom of them.
	lim.Cur = uint64(n + headroom)
	return unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
}

// echoConn echoes c until its EOF, then shuts down writing.
func echoConn(c *smcloop.Conn) (int64, error) {
	c.SetDeadline(time.Now().Add(lineTimeout))
	n, err := io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{c})
	if err != nil {
		return n, err
	}
	return n, c.CloseWrite()
}

// echoCheck sends a fresh payload on c and checks that exactly it comes back.
func echoCheck(c *smcloop.Conn, seed uint64) connReport {
	r := connReport{SMC: c.UsingSMC()}
	r.Local, r.Peer = c.FallbackReason()
	c.SetDeadline(time.Now().Add(lineTimeout))
	data := payload(seed, resourcePayload)
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if werr := <-werr; werr != nil && err == nil {
		err = werr
	}
	switch {
	case err != nil:
		r.Err = err.Error()
	case !bytes.Equal(got, data):
		r.Err = fmt.Sprintf("echo of %d bytes came back as %d bytes, first difference at %d", len(data), len(got), firstDiff(got, data))
	default:
		r.Bytes = len(got)
	}
	return r
}

func sayJSON(prefix string, v any) {
	b, _ := json.Marshal(v)
	say("%s %s", prefix, b)
}

// echoListener is an smcloop echo server in this process; Close ends it and its
// connections.
type echoListener struct {
	ln    *smcloop.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []*smcloop.Conn
}

func startEchoListener(t *testing.T) *echoListener {
	t.Helper()
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e := &echoListener{ln: ln}
	e.wg.Go(func() {
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Go(func() { echoConn(c) })
		}
	})
	t.Cleanup(e.close)
	return e
}

func (e *echoListener) close() {
	e.ln.Close()
	e.mu.Lock()
	for _, c := range e.conns {
		c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
}

// childDials is the limited client's half: it dials addr after one warm-up connection,
// with its descriptors (or DMBs, by its environment) limited, and reports every
// connection as "CONN {json}". It keeps the SMC-D connections open, so that their
// buffers stay in use, and closes the fallbacks, so that the room left stays the same.
func childDials(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("want <addr> <fd headroom or 0>, got %q", args)
	}
	addr := args[0]
	headroom, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	// The warm-up makes what every process makes once (the link to the listener, the
	// ISM device, the link group) before the limit.
	w, err := smcloop.Dial("tcp", addr)
	if err != nil {
		return fmt.Errorf("warm-up dial: %w", err)
	}
	if r := echoCheck(w, 1); r.Err != "" || !r.SMC {
		return fmt.Errorf("warm-up connection: %v %s", r, r.Err)
	}
	w.Close()
	if err := warmSleep(); err != nil {
		return err
	}
	if headroom > 0 {
		if err := limitFDs(headroom); err != nil {
			return err
		}
	}
	var keep []*smcloop.Conn
	defer closeAll(&keep)
	for i := range resourceDials {
		c, err := smcloop.Dial("tcp", addr)
		if err != nil {
			sayJSON("CONN", connReport{Err: fmt.Sprintf("dial %d: %v", i, err)})
			continue
		}
		r := echoCheck(c, uint64(100+i))
		sayJSON("CONN", r)
		if r.SMC {
			keep = append(keep, c)
		} else {
			c.Close()
		}
	}
	say("DONE")
	return nil
}

// warmSleep makes this process block once in an SMC-D Read, so that what a process
// makes at its first sleep (the liveness watcher's epoll instance, one descriptor for the
// process's life) exists before a child sets its limit; otherwise it would take the
// last descriptor at whichever connection first sleeps. The Read waits for data that
// never comes, until a deadline.
func warmSleep() error {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	acc := make(chan *smcloop.Conn, 1)
	go func() {
		c, _ := ln.AcceptSMC()
		acc <- c
	}()
	c, err := smcloop.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	s := <-acc
	if s == nil {
		return errors.New("warm-up: accept failed")
	}
	defer s.Close()
	if !s.UsingSMC() {
		return fmt.Errorf("warm-up connection is %s", s.Mode())
	}
	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("warm-up Read: %v, want a timeout", err)
	}
	return nil
}

// childServe is the limited server's half: an echo listener that reports each
// connection as "CONN {json}" once it has echoed it. It keeps the SMC-D connections
// open and closes the fallbacks (see childDials). Commands: "limit N" sets the
// descriptor limit N above those open, "exit" ends it.
func childServe() error {
	if err := warmSleep(); err != nil {
		return err
	}
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	say("ADDR %s", ln.Addr())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var keep []*smcloop.Conn
	wg.Go(func() {
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			wg.Go(func() {
				r := connReport{SMC: c.UsingSMC()}
				r.Local, r.Peer = c.FallbackReason()
				n, err := echoConn(c)
				r.Bytes = int(n)
				if err != nil {
					r.Err = err.Error()
				}
				if r.SMC && err == nil {
					mu.Lock()
					keep = append(keep, c)
					mu.Unlock()
				} else {
					c.Close()
				}
				sayJSON("CONN", r)
			})
		}
	})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "limit":
			n, err := strconv.Atoi(f[1])
			if err == nil {
				err = limitFDs(n)
			}
			if err != nil {
				say("ERR limit: %v", err)
				continue
			}
			say("OK limit")
		case len(f) == 1 && f[0] == "stats":
			sayJSON("OK stats", ln.Stats())
		case len(f) == 1 && f[0] == "exit":
			ln.Close()
			mu.Lock()
			for _, c := range keep {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
			return nil
		}
	}
	return nil
}

// runChild runs a resource child's role and exits the process.
func runChild(role string, args []string) {
	var err error
	switch role {
	case "dials":
		err = childDials(args)
	case "serve":
		err = childServe()
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// checkResourceConns checks the reports of resourceDials connections: every one
// echoed exactly; the first come up on SMC-D, and once one fell back, with one of the
// reasons in want (as this side sees them), so do the rest. It returns how many were
// SMC-D.
func checkResourceConns(t *testing.T, rs []connReport, want ...[2]uint32) int {
	t.Helper()
	smc, fellBack := 0, false
	for i, r := range rs {
		require.Empty(t, r.Err, "connection %d (%v)", i, r)
		require.Equal(t, resourcePayload, r.Bytes, "connection %d (%v)", i, r)
		if r.SMC {
			smc++
			continue
		}
		fellBack = true
		assert.Contains(t, want, [2]uint32{r.Local, r.Peer}, "connection %d fell back with %v", i, r)
	}
	require.True(t, fellBack, "no connection fell back: the limit was never reached")
	require.NotZero(t, smc, "no connection used SMC-D: the limit left no room at all")
	t.Logf("%d of %d connections on SMC-D, the rest TCP: %v", smc, len(rs), rs)
	return smc
}

// expectConns reads n "CONN" reports from p.
func expectConns(p *peer, n int) []connReport {
	rs := make([]connReport, n)
	for i := range rs {
		p.expectJSON("CONN", &rs[i])
	}
	return rs
}

// headrooms are the descriptor limits the tests try, above what the limited process
// holds: six consecutive values, so that the process runs out at different steps of a
// handshake (accepting or dialling the TCP connection, a new slab, the attach).
func headrooms() []int {
	h := make([]int, 6)
	for i := range h {
		h[i] = fdHeadroom + i
	}
	return h
}

// TestResourceClientOutOfFDs: a client with few descriptors left dials an smcloop
// listener again and again. Every dial succeeds: first on SMC-D, then, once creating or
// attaching a DMB fails for want of descriptors, as TCP with the client's decline MEM.
// Every byte echoes exactly and the client does not crash.
func TestResourceClientOutOfFDs(t *testing.T) {
	if role, args, ok := childRole(); ok {
		runChild(role, args)
	}
	for _, h := range headrooms() {
		t.Run(fmt.Sprintf("headroom=%d", h), func(t *testing.T) {
			e := startEchoListener(t)
			p := startChild(t, "TestResourceClientOutOfFDs", fmt.Sprintf("dials %s %d", e.ln.Addr(), h))
			rs := expectConns(p, resourceDials)
			p.expect("DONE")
			require.NoError(t, p.wait())
			checkResourceConns(t, rs, [2]uint32{clc.DeclMem, 0})
		})
	}
}

// TestResourceServerOutOfFDs: the same with the listener's process short of
// descriptors. Every dial succeeds, first on SMC-D, then as TCP with MEM: declined by
// the server when it cannot create a DMB, or by the client when the server's device
// cannot pass it the server's DMB. No handshake fails (the server's own attach comes
// after the client's Confirm, when no decline is possible any more), and the listener
// keeps accepting throughout.
func TestResourceServerOutOfFDs(t *testing.T) {
	if role, args, ok := childRole(); ok {
		runChild(role, args)
	}
	serverDeclined := false
	for _, h := range headrooms() {
		t.Run(fmt.Sprintf("headroom=%d", h), func(t *testing.T) {
			p, addr, c := startWarmServer(t, "TestResourceServerOutOfFDs")
			p.do("limit %d", h)

			var rs []connReport
			keep := []*smcloop.Conn{c}
			defer closeAll(&keep)
			fdsAtLimit := fdTargets(p.pid())
			for i := range resourceDials {
				c, err := smcloop.Dial("tcp", addr)
				require.NoError(t, err, "dial %d; server descriptors at the limit:\n%s\nnow:\n%s", i, fdsAtLimit, fdTargets(p.pid()))
				r := echoCheck(c, uint64(100+i))
				rs = append(rs, r)
				var sr connReport
				p.expectJSON("CONN", &sr) // the server's view, once it has echoed
				require.Empty(t, sr.Err, "server's end of connection %d", i)
				require.Equal(t, r.SMC, sr.SMC, "connection %d: client %v, server %v", i, r, sr)
				keep = append(keep, c)
				serverDeclined = serverDeclined || r.Peer == clc.DeclMem
			}
			checkResourceConns(t, rs, [2]uint32{clc.DeclPeerDecl, clc.DeclMem}, [2]uint32{clc.DeclMem, 0})
			var ls smcloop.ListenerStats
			p.send("stats")
			p.expectJSON("OK stats", &ls)
			assert.Zero(t, ls.HandshakeErrs, "handshakes failed on the server: %+v", ls)
			p.exit()
		})
	}
	assert.True(t, serverDeclined, "in no run did the server itself run out while creating a DMB")
}

// TestResourceDMBLimit: with SMCLOOP_MAX_DMBS 3 on one side, the connections beyond its
// DMBs fall back with MAX_DMB, on either side.
func TestResourceDMBLimit(t *testing.T) {
	if role, args, ok := childRole(); ok {
		runChild(role, args)
	}
	const maxDMBs = "SMCLOOP_MAX_DMBS=3"
	t.Run("client", func(t *testing.T) {
		e := startEchoListener(t)
		p := startChild(t, "TestResourceDMBLimit", fmt.Sprintf("dials %s 0", e.ln.Addr()), maxDMBs)
		rs := expectConns(p, resourceDials)
		p.expect("DONE")
		require.NoError(t, p.wait())
		// The warm-up's DMB is reused by the first connection: three on SMC-D.
		assert.Equal(t, 3, checkResourceConns(t, rs, [2]uint32{clc.DeclMaxDMB, 0}))
	})
	t.Run("server", func(t *testing.T) {
		p := startChild(t, "TestResourceDMBLimit", "serve", maxDMBs)
		addr := p.addr()
		var keep []*smcloop.Conn
		defer closeAll(&keep)
		rs := dialServed(t, p, addr, resourceDials, &keep)
		assert.Equal(t, 3, checkResourceConns(t, rs, [2]uint32{clc.DeclPeerDecl, clc.DeclMaxDMB}))
		p.exit()
	})
}

// TestResourceMemoryCgroup: a server in a memory cgroup too small for all the DMBs its
// clients ask for. A DMB's pages are allocated when it is registered and charged to the
// cgroup, and a charge over the limit runs the cgroup's OOM killer rather than failing;
// so the server checks the room under the limit first. Expected: the first connections
// on SMC-D, then TCP declined by the server with MEM, every byte echoed, and the server
// alive to exit cleanly. Needs root and a cgroup v1 memory controller (skipped
// otherwise).
func TestResourceMemoryCgroup(t *testing.T) {
	if role, args, ok := childRole(); ok {
		runChild(role, args)
	}
	parent := memoryCgroupDir(t)
	p, addr, c := startWarmServer(t, "TestResourceMemoryCgroup", "SMCLOOP_RMEM=1048576")
	keep := []*smcloop.Conn{c}
	defer closeAll(&keep)

	// A cgroup of 48 MiB for the server alone: room for a few dozen 1 MiB DMBs at most.
	cg := filepath.Join(parent, fmt.Sprintf("smcloop-test-%d", p.pid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup here: %v", err)
	}
	defer func() {
		// Back to the parent if still alive, then remove the (then empty) cgroup.
		os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(p.pid())), 0)
		os.Remove(cg)
	}()
	require.NoError(t, os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte("50331648"), 0))
	require.NoError(t, os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(p.pid())), 0))

	const dials = 64
	rs := dialServed(t, p, addr, dials, &keep)
	smc := checkResourceConns(t, rs, [2]uint32{clc.DeclPeerDecl, clc.DeclMem})
	assert.Less(t, smc, 48, "more 1 MiB DMBs than a 48 MiB cgroup holds")
	b, err := os.ReadFile(filepath.Join(cg, "memory.oom_control"))
	if err == nil {
		assert.Contains(t, string(b), "oom_kill 0", "the cgroup's OOM killer ran")
	}
	p.exit()
}

// memoryCgroupDir returns this process's cgroup v1 memory directory, where a test may
// make a child cgroup, or skips the test.
func memoryCgroupDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a memory cgroup")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "memory") {
			dir := filepath.Join("/sys/fs/cgroup/memory", f[2])
			if _, err := os.Stat(filepath.Join(dir, "memory.limit_in_bytes")); err == nil {
				return dir
			}
		}
	}
	t.Skip("no cgroup v1 memory controller")
	return ""
}
