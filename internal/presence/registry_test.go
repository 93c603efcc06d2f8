package presence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testTimeout bounds every wait for an asynchronous event; it is a failure guard, never
// a synchronisation.
const testTimeout = 10 * time.Second

// reservePort holds a TCP port on 127.0.0.1 for the rest of the test, so no other
// listener (and no other test's listener name) can use it, and returns its address.
func reservePort(t testing.TB) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	forgetDst(dst)
	return dst
}

// forgetDst drops this process's cached answer for dst: the port may have been an
// earlier test's, whose absence (or bad listener) would otherwise be remembered.
func forgetDst(dst netip.AddrPort) {
	if _, ok := dstCache.LoadAndDelete(dst); ok {
		dstCount.Add(-1)
	}
}

func advertise(t testing.TB, addr netip.AddrPort) *Advert {
	t.Helper()
	a, err := Advertise(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// lookup is Lookup that must find a link.
func lookup(t testing.TB, dst netip.AddrPort) *Link {
	t.Helper()
	l := Lookup(dst)
	if l == nil {
		t.Fatalf("Lookup(%v) = nil with a listener advertised", dst)
	}
	return l
}

func announce(t testing.TB, l *Link, port uint16, dst netip.AddrPort) *Ticket {
	t.Helper()
	tk, ok := l.Announce(port, dst)
	if !ok {
		t.Fatalf("Announce(%d, %v) failed", port, dst)
	}
	return tk
}

// linkEnded returns a channel receiving the owner id of every link a ends (after its
// sweep).
func linkEnded(a *Advert) <-chan uint16 {
	ch := make(chan uint16, 16)
	f := func(owner uint16) { ch <- owner }
	a.linkEnded.Store(&f)
	return ch
}

func recvOwner(t *testing.T, ch <-chan uint16) uint16 {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(testTimeout):
		t.Fatal("no link ended")
		return 0
	}
}

// slot reads slot port of a's table without consuming it.
func slot(a *Advert, port uint16) uint64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.tab.slots[port]
}

func waitGone(t *testing.T, l *Link) {
	t.Helper()
	select {
	case <-l.gone:
	case <-time.After(testTimeout):
		t.Fatal("link not released")
	}
}

func client(dst netip.AddrPort, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(dst.Addr(), port)
}

func TestAnnounceTakeOnce(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	tk := announce(t, l, 40001, dst)
	if tk.Port() != 40001 || tk.Dst() != dst {
		t.Fatalf("ticket for %d→%v, want 40001→%v", tk.Port(), tk.Dst(), dst)
	}
	if !tk.Established() {
		t.Fatal("Established false with the listener alive")
	}
	if !a.Take(client(dst, 40001), dst) {
		t.Fatal("announced connection not taken")
	}
	if a.Take(client(dst, 40001), dst) {
		t.Fatal("announcement taken twice")
	}
	if a.Links() != 1 {
		t.Fatalf("Links() = %d, want 1", a.Links())
	}
}

func TestTakeUnannouncedOrOtherDestination(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	if a.Take(client(dst, 40002), dst) {
		t.Fatal("unannounced connection taken")
	}
	announce(t, l, 40003, dst)
	other := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), dst.Port())
	if a.Take(client(dst, 40003), other) {
		t.Fatal("announcement for another destination IP taken")
	}
	if _, ok := l.Announce(40003, dst); ok {
		t.Fatal("second announcement of a taken slot succeeded")
	}
	// A dual-stack listener sees the IPv4 destination IPv4-mapped.
	mapped := netip.AddrPortFrom(netip.AddrFrom16(dst.Addr().As16()), dst.Port())
	if !a.Take(client(dst, 40003), mapped) {
		t.Fatal("announcement not taken through the IPv4-mapped local address")
	}
}

func TestAnnounceUnspecifiedDestination(t *testing.T) {
	dst := reservePort(t)
	advertise(t, dst)
	l := lookup(t, dst)
	for _, ip := range []string{"0.0.0.0", "::"} {
		if _, ok := l.Announce(40004, netip.AddrPortFrom(netip.MustParseAddr(ip), dst.Port())); ok {
			t.Errorf("announced for unspecified destination %s", ip)
		}
	}
	var nilLink *Link
	if _, ok := nilLink.Announce(40004, dst); ok {
		t.Error("nil link announced")
	}
}

func TestWithdrawRestore(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	announce(t, l, 40010, dst)

	a.Withdraw()
	if got := Lookup(dst); got != nil {
		t.Fatal("Lookup found a withdrawn listener")
	}
	if _, ok := l.Announce(40011, dst); ok {
		t.Fatal("announced on a withdrawn table")
	}
	if !a.Take(client(dst, 40010), dst) {
		t.Fatal("announcement made before Withdraw not taken")
	}

	a.Restore()
	if got := lookup(t, dst); got != l {
		t.Fatal("Restore: Lookup returned a new link, want the cached one")
	}
	announce(t, l, 40011, dst)
	if a.Links() != 1 {
		t.Fatalf("Links() = %d, want 1", a.Links())
	}
}

// TestProbe: a withdrawn table with n probes admits exactly n announcements, then none;
// Withdraw and Restore take unused probes back.
func TestProbe(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	a.Withdraw()
	a.Probe(1)
	if got := Lookup(dst); got != l {
		t.Fatal("Lookup did not find a withdrawn listener with a probe left")
	}
	announce(t, l, 40012, dst)
	if _, ok := l.Announce(40013, dst); ok {
		t.Fatal("second announcement with one probe")
	}
	if got := Lookup(dst); got != nil {
		t.Fatal("Lookup found a withdrawn listener with no probe left")
	}
	if !a.Take(client(dst, 40012), dst) {
		t.Fatal("probe announcement not taken")
	}
	a.Probe(5)
	a.Withdraw()
	if _, ok := l.Announce(40014, dst); ok {
		t.Fatal("Withdraw left probes")
	}
	a.Probe(5)
	a.Restore()
	for p := uint16(40015); p < 40025; p++ {
		announce(t, l, p, dst) // the signal is up: no probes needed
	}
	a.Withdraw()
	if _, ok := l.Announce(40030, dst); ok {
		t.Fatal("Restore left probes")
	}
}

func TestCancel(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)

	// Cancel after Take leaves the slot's next announcement alone.
	old := announce(t, l, 40020, dst)
	if !a.Take(client(dst, 40020), dst) {
		t.Fatal("not taken")
	}
	next := announce(t, l, 40020, dst)
	if next.val == old.val {
		t.Fatal("two announcements of the same port and destination have the same value")
	}
	old.Cancel()
	if slot(a, 40020) != next.val {
		t.Fatal("late Cancel cleared the next announcement")
	}

	// Cancel before Take withdraws the announcement; it is idempotent and final.
	tk := announce(t, l, 40021, dst)
	tk.Cancel()
	tk.Cancel()
	if a.Take(client(dst, 40021), dst) {
		t.Fatal("cancelled announcement taken")
	}
	if tk.Established() {
		t.Fatal("cancelled ticket established")
	}
}

func TestLinkEOFSweepsOwnerSlots(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	ended := linkEnded(a)
	l := lookup(t, dst)
	tk := announce(t, l, 40030, dst)
	announce(t, l, 40031, dst)

	l.kill() // as if this process closed its link
	if o := recvOwner(t, ended); o != l.Owner() {
		t.Fatalf("ended owner %d, want %d", o, l.Owner())
	}
	for _, p := range []uint16{40030, 40031} {
		if v := slot(a, p); v != 0 {
			t.Errorf("slot %d = %#x after its owner's link ended", p, v)
		}
	}
	if a.Links() != 0 {
		t.Fatalf("Links() = %d, want 0", a.Links())
	}
	if tk.Established() {
		t.Fatal("ticket of a dead link established")
	}
	tk.Cancel() // no-op on a dead link

	l2 := lookup(t, dst)
	if l2 == l || l2.Owner() == l.Owner() {
		t.Fatalf("relinked with owner %d (old %d): want a new link and a fresh id", l2.Owner(), l.Owner())
	}
}

// helperEnv selects TestHelperProcess's role in a child process.
const helperEnv = "SMCLOOP_PRESENCE_HELPER"

// TestHelperProcess is a child process of other tests, not a test: "dialer <dst> <port>"
// links and announces, "listener <addr>" advertises; both print "ready" and wait for
// stdin to close or to be killed.
func TestHelperProcess(t *testing.T) {
	args := strings.Fields(os.Getenv(helperEnv))
	if len(args) == 0 {
		t.Skip("child process helper")
	}
	dst := netip.MustParseAddrPort(args[1])
	switch args[0] {
	case "dialer":
		var port uint16
		fmt.Sscan(args[2], &port)
		announce(t, lookup(t, dst), port, dst)
	case "listener":
		advertise(t, dst)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
}

// startHelper runs TestHelperProcess with args and waits for it to be ready.
func startHelper(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(args, " "))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "ready" {
			go io.Copy(io.Discard, out)
			return cmd
		}
	}
	t.Fatalf("helper %v exited before ready: %v", args, sc.Err())
	return nil
}

func TestDialerProcessDeathSweepsSlots(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	ended := linkEnded(a)
	cmd := startHelper(t, "dialer", dst.String(), "40040")
	if slot(a, 40040) == 0 || a.Links() != 1 {
		t.Fatalf("child announced: slot %#x, %d links; want a slot and 1 link", slot(a, 40040), a.Links())
	}
	cmd.Process.Kill()
	cmd.Wait()
	recvOwner(t, ended)
	if v := slot(a, 40040); v != 0 {
		t.Fatalf("slot = %#x after the dialer process died", v)
	}
	if a.Take(client(dst, 40040), dst) || a.Links() != 0 {
		t.Fatal("dead dialer's announcement or link survived")
	}
}

func TestListenerProcessDeath(t *testing.T) {
	dst := reservePort(t)
	cmd := startHelper(t, "listener", dst.String())
	l := lookup(t, dst)
	tk := announce(t, l, 40050, dst)
	cmd.Process.Kill()
	cmd.Wait() // the child's descriptors are closed: the link is at EOF
	if tk.Established() {
		t.Fatal("Established true after the listener process died")
	}
	waitGone(t, l)
	if Lookup(dst) != nil {
		t.Fatal("Lookup found the dead listener")
	}
}

func TestCloseAdvert(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	l := lookup(t, dst)
	tk := announce(t, l, 40060, dst)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if tk.Established() {
		t.Fatal("Established true after the advert closed")
	}
	if Lookup(dst) != nil {
		t.Fatal("Lookup found a closed listener")
	}
	waitGone(t, l)
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if a.Take(client(dst, 40060), dst) {
		t.Fatal("Take true after Close")
	}
	a.Withdraw() // no effect, no panic
	a.Restore()
}

func TestAdvertiseTwice(t *testing.T) {
	dst := reservePort(t)
	advertise(t, dst)
	_, err := Advertise(dst)
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second Advertise: %v, want EADDRINUSE", err)
	}
	if !strings.Contains(err.Error(), "held by another socket") {
		t.Fatalf("unclear error: %v", err)
	}
}

func TestConcurrentLookupCreatesOneLink(t *testing.T) {
	dst := reservePort(t)
	a := advertise(t, dst)
	const n = 64
	var (
		start = make(chan struct{})
		got   [n]*Link
		wg    sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			<-start
			got[i] = Lookup(dst)
		})
	}
	close(start)
	wg.Wait()
	for i, l := range got {
		if l == nil || l != got[0] {
			t.Fatalf("lookup %d returned %p, lookup 0 %p", i, l, got[0])
		}
	}
	if a.Links() != 1 {
		t.Fatalf("Links() = %d, want 1", a.Links())
	}
}

func TestAbsenceCached(t *testing.T) {
	now := time.Now()
	clock = func() time.Time { return now }
	defer func() { clock = time.Now }()

	dst := reservePort(t)
	if Lookup(dst) != nil {
		t.Fatal("found a listener before advertising")
	}
	advertise(t, dst)
	if Lookup(dst) != nil {
		t.Fatal("absence not cached")
	}
	now = now.Add(absentTTL)
	lookup(t, dst)
}

func TestWildcardListenerDualStack(t *testing.T) {
	ln, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Skipf("no IPv6 wildcard listener: %v", err)
	}
	defer ln.Close()
	wild := ln.Addr().(*net.TCPAddr).AddrPort()
	a := advertise(t, wild)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), wild.Port())
	forgetDst(dst)
	forgetDst(netip.AddrPortFrom(netip.IPv6Loopback(), wild.Port()))
	l := lookup(t, dst)
	if l.Name() != ListenerName(wild) {
		t.Fatalf("linked to %q, want the wildcard %q", l.Name(), ListenerName(wild))
	}
	c, s := dialAnnounced(t, ln, l, dst)
	defer c.Close()
	defer s.Close()
	if !a.Take(s.RemoteAddr().(*net.TCPAddr).AddrPort(), s.LocalAddr().(*net.TCPAddr).AddrPort()) {
		t.Fatalf("IPv4 client of a dual-stack listener not taken (local %v)", s.LocalAddr())
	}
	// Another local destination of the same listener shares the link.
	if l6 := Lookup(netip.AddrPortFrom(netip.IPv6Loopback(), wild.Port())); l6 != nil && l6 != l {
		t.Fatal("second destination of one listener got a second link")
	}
}

// dialAnnounced dials dst the way smcloop does: bind, announce, connect, Established.
// It returns the client connection and the server's accepted one.
func dialAnnounced(t *testing.T, ln net.Listener, l *Link, dst netip.AddrPort) (net.Conn, net.Conn) {
	t.Helper()
	var tk *Ticket
	d := net.Dialer{Control: func(network, _ string, rc syscall.RawConn) error {
		port, err := BindBeforeConnect(rc, network, netip.AddrPort{}, true)
		if err != nil {
			return err
		}
		tk = announce(t, l, port, dst)
		return nil
	}}
	c, err := d.Dial("tcp4", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	if !tk.Established() {
		t.Fatal("Established false against a live listener")
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func TestEndToEndTCP(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	forgetDst(dst)
	a := advertise(t, dst)
	l := lookup(t, dst)
	accepted := func(s net.Conn) bool {
		return a.Take(s.RemoteAddr().(*net.TCPAddr).AddrPort(), s.LocalAddr().(*net.TCPAddr).AddrPort())
	}

	c, s := dialAnnounced(t, ln, l, dst)
	if !accepted(s) {
		t.Fatal("smcloop dialer's connection not taken")
	}
	c.Close()
	s.Close()

	c, err = net.Dial("tcp4", dst.String()) // a plain client
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if accepted(s) {
		t.Fatal("plain client's connection taken")
	}
}

func TestHostileDialer(t *testing.T) {
	dropLinks() // earlier tests' links must not close during the descriptor count
	dst := reservePort(t)
	a := advertise(t, dst)
	ended := linkEnded(a)
	good := lookup(t, dst)

	raw, err := net.Dial("unixpacket", "@"+a.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	h, tfd, err := readHello(raw.(*net.UnixConn))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(tfd, 0); err == nil {
		t.Fatal("a linked process could truncate the table")
	}
	mem, err := unix.Mmap(tfd, 0, tableSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(tfd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)

	// Garbage in the header and in a slot: misclassification at worst, never a panic.
	hostile := newTable(mem)
	for i := range offWithdrawn { // magic, version, slot count
		mem[i] = 0xa5
	}
	hostile.slots[40070] = ^uint64(0)
	if a.Take(client(dst, 40070), dst) {
		t.Fatal("garbage slot taken")
	}
	if _, ok := good.Announce(40070, dst); ok {
		t.Fatal("announced over a garbage slot")
	}
	announce(t, good, 40071, dst)
	if !a.Take(client(dst, 40071), dst) {
		t.Fatal("good link stopped working beside a hostile one")
	}

	// Sending anything, descriptors included, ends the hostile link only.
	fds0 := countFDs(t)
	if _, _, err := raw.(*net.UnixConn).WriteMsgUnix([]byte("x"), unix.UnixRights(0), nil); err != nil {
		t.Fatal(err)
	}
	if o := recvOwner(t, ended); o != h.owner {
		t.Fatalf("ended owner %d, want the hostile %d", o, h.owner)
	}
	raw.Close()
	// Both ends of the hostile link are closed; nothing it sent was kept.
	if n := countFDs(t); n != fds0-2 {
		t.Fatalf("%d descriptors after the hostile link ended, want %d", n, fds0-2)
	}
	if a.Links() != 1 {
		t.Fatalf("Links() = %d, want the good link only", a.Links())
	}
	announce(t, good, 40072, dst)
	if !a.Take(client(dst, 40072), dst) {
		t.Fatal("good link stopped working after the hostile one was dropped")
	}
}

// memfd creates a memfd of size bytes, with a valid header if header and sealed against
// shrinking if sealed.
func memfd(t *testing.T, size int64, header, sealed bool) int {
	t.Helper()
	fd, err := unix.MemfdCreate("smcloop-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if header && size >= headerSize {
		b := make([]byte, headerSize)
		writeHeader(b)
		if _, err := unix.Pwrite(fd, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	if sealed {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// fakeListener serves every link to dst's listener name with serve and then closes it;
// the returned channel receives a value each time that is done.
func fakeListener(t *testing.T, dst netip.AddrPort, serve func(c *net.UnixConn)) <-chan struct{} {
	t.Helper()
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + ListenerName(dst), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{}, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			serve(c)
			c.Close()
			served <- struct{}{}
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return served
}

func TestLookupRejectsBadListeners(t *testing.T) {
	good := hello{owner: 1, size: tableSize}.marshal()
	send := func(t *testing.T, msg []byte, fds ...int) func(*net.UnixConn) {
		return func(c *net.UnixConn) {
			var oob []byte
			if len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			if _, _, err := c.WriteMsgUnix(msg, oob, nil); err != nil {
				t.Error(err)
			}
		}
	}
	cases := []struct {
		name   string
		serve  func(t *testing.T) func(*net.UnixConn)
		absent bool // the error counts as "no listener", not as a protocol error
	}{
		{"closed before hello", func(t *testing.T) func(*net.UnixConn) {
			return func(c *net.UnixConn) { c.Close() }
		}, true},
		{"bad magic", func(t *testing.T) func(*net.UnixConn) {
			msg := append([]byte{}, good...)
			msg[0] ^= 1
			return send(t, msg, memfd(t, tableSize, true, true))
		}, false},
		{"long hello", func(t *testing.T) func(*net.UnixConn) {
			return send(t, append(append([]byte{}, good...), 0), memfd(t, tableSize, true, true))
		}, false},
		{"no descriptor", func(t *testing.T) func(*net.UnixConn) { return send(t, good) }, false},
		{"two descriptors", func(t *testing.T) func(*net.UnixConn) {
			return send(t, good, memfd(t, tableSize, true, true), memfd(t, tableSize, true, true))
		}, false},
		{"unsealed memfd", func(t *testing.T) func(*net.UnixConn) {
			return send(t, good, memfd(t, tableSize, true, false))
		}, false},
		{"short memfd", func(t *testing.T) func(*net.UnixConn) {
			return send(t, good, memfd(t, tableSize-8, true, true))
		}, false},
		{"bad header", func(t *testing.T) func(*net.UnixConn) {
			return send(t, good, memfd(t, tableSize, false, true))
		}, false},
		{"not a memfd", func(t *testing.T) func(*net.UnixConn) {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			return send(t, good, p[0])
		}, false},
		{"silent", func(t *testing.T) func(*net.UnixConn) {
			return func(c *net.UnixConn) { c.Read(make([]byte, 1)) } // until the dialer gives up
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := reservePort(t)
			served := fakeListener(t, dst, tc.serve(t))
			dropLinks()
			fds0, maps0 := countFDs(t), countTableMaps(t)
			_, err := dialLink(ListenerName(dst))
			select {
			case <-served:
			case <-time.After(testTimeout):
				t.Fatal("fake listener never finished")
			}
			var pe *ProtocolError
			switch {
			case err == nil:
				t.Fatal("linked to a bad listener")
			case tc.absent != isAbsent(err):
				t.Fatalf("error %v: absent = %v, want %v", err, isAbsent(err), tc.absent)
			case tc.name != "silent" && !tc.absent && !errors.As(err, &pe):
				t.Fatalf("error %v is not a *ProtocolError", err)
			}
			if fds, maps := countFDs(t), countTableMaps(t); fds != fds0 || maps != maps0 {
				t.Fatalf("after the failed link: %d descriptors, %d table mappings; want %d, %d", fds, maps, fds0, maps0)
			}
			if tc.name != "silent" && Lookup(dst) != nil {
				t.Fatal("Lookup returned a link to a bad listener")
			}
		})
	}
}

func TestOwnerIDs(t *testing.T) {
	var o ownerIDs
	seen := make(map[uint16]bool)
	for {
		id, ok := o.get()
		if !ok {
			break
		}
		if id == 0 || seen[id] {
			t.Fatalf("owner id %d handed out twice or zero", id)
		}
		seen[id] = true
	}
	if len(seen) != 65535 {
		t.Fatalf("%d owner ids, want 65535", len(seen))
	}
	o.put(7)
	o.put(3)
	if a, _ := o.get(); a != 7 {
		t.Fatalf("reused %d first, want the oldest freed id 7", a)
	}
	if b, _ := o.get(); b != 3 {
		t.Fatalf("reused %d, want 3", b)
	}
}

// dropLinks releases every dialer link of this process, so that descriptor and mapping
// counts do not depend on links of earlier tests that are still being released.
func dropLinks() {
	nameCache.Range(func(_, v any) bool {
		if e := v.(*nameEntry); isClosed(e.ready) && e.link != nil {
			e.link.kill()
		}
		return true
	})
}

func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// countTableMaps counts this process's mappings of registration tables (its own and its
// links').
func countTableMaps(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:"+memfdName)
}

func TestNoLeaks(t *testing.T) {
	cycle := func() {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		dst := ln.Addr().(*net.TCPAddr).AddrPort()
		forgetDst(dst) // a port of an earlier cycle may come back
		a, err := Advertise(dst)
		if err != nil {
			t.Fatal(err)
		}
		l := lookup(t, dst)
		announce(t, l, 40080, dst)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if Lookup(dst) != nil {
			t.Fatal("Lookup found a closed listener")
		}
	}
	cycle() // warm up: epoll descriptor, caches
	dropLinks()
	fds0, maps0 := countFDs(t), countTableMaps(t)
	for range 100 {
		cycle()
	}
	if fds, maps := countFDs(t), countTableMaps(t); fds != fds0 || maps != maps0 {
		t.Fatalf("after 100 listeners came and went: %d descriptors, %d table mappings; want %d, %d", fds, maps, fds0, maps0)
	}
}

func BenchmarkAnnounceTake(b *testing.B) {
	dst := reservePort(b)
	a := advertise(b, dst)
	l := lookup(b, dst)
	c := client(dst, 40090)
	for b.Loop() {
		if _, ok := l.Announce(40090, dst); !ok || !a.Take(c, dst) {
			b.Fatal("announce/take failed")
		}
	}
}

func BenchmarkAnnounceTakeParallel(b *testing.B) {
	dst := reservePort(b)
	a := advertise(b, dst)
	l := lookup(b, dst)
	var next sync.Mutex
	port := uint16(30000)
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		port++
		p := port
		next.Unlock()
		c := client(dst, p)
		for pb.Next() {
			if _, ok := l.Announce(p, dst); !ok || !a.Take(c, dst) {
				b.Error("announce/take failed")
				return
			}
		}
	})
}

func BenchmarkLookupCached(b *testing.B) {
	dst := reservePort(b)
	advertise(b, dst)
	lookup(b, dst)
	for b.Loop() {
		if Lookup(dst) == nil {
			b.Fatal("lost the link")
		}
	}
}

func BenchmarkLookupAbsent(b *testing.B) {
	dst := reservePort(b)
	Lookup(dst)
	for b.Loop() {
		Lookup(dst)
	}
}

// BenchmarkDialPath is the registry's whole per-connection cost: Lookup, Announce and
// Established on the dialer, Take on the listener.
func BenchmarkDialPath(b *testing.B) {
	dst := reservePort(b)
	a := advertise(b, dst)
	lookup(b, dst)
	c := client(dst, 40091)
	for b.Loop() {
		tk, ok := Lookup(dst).Announce(40091, dst)
		if !ok || !tk.Established() || !a.Take(c, dst) {
			b.Fatal("dial path failed")
		}
	}
}

// TestLookupContextSilentListener: a listener name that never sends its hello holds a
// lookup for up to linkTimeout (here made an hour); a dial whose context ends meanwhile
// gets no link at once, and the lookup goes on without it.
func TestLookupContextSilentListener(t *testing.T) {
	old := linkTimeout
	linkTimeout = time.Hour
	dst := reservePort(t)
	accepted := make(chan *net.UnixConn, 1)
	release := make(chan struct{})
	fakeListener(t, dst, func(c *net.UnixConn) {
		accepted <- c
		<-release // silent until the test ends
	})
	defer func() {
		// The fake listener closes the link: the background lookup ends (no listener),
		// and only then is linkTimeout, which it read, restored.
		close(release)
		Lookup(dst)
		linkTimeout = old
	}()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *Link, 1)
	go func() { got <- LookupContext(ctx, dst) }()
	select {
	case <-accepted: // the lookup is waiting for the hello now
	case <-time.After(testTimeout):
		t.Fatal("the lookup never linked to the silent listener")
	}
	cancel()
	select {
	case l := <-got:
		if l != nil {
			t.Fatal("LookupContext returned a link from a silent listener")
		}
	case <-time.After(testTimeout):
		t.Fatal("LookupContext did not return when its context was cancelled")
	}
	// A second caller with a live context also waits for the same lookup, not a new link.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if LookupContext(ctx2, dst) != nil {
		t.Fatal("LookupContext with a cancelled context returned a link")
	}
	select {
	case <-accepted:
		t.Fatal("a second lookup linked again while the first was in progress")
	default:
	}
}
