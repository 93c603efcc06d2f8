//go:build linux

package presence

import (
	"bufio"
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

	"github.com/stretchr/testify/require"
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
	require.NoError(t, err)
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
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

// lookup is Lookup that must find a link.
func lookup(t testing.TB, dst netip.AddrPort) *Link {
	t.Helper()
	l := Lookup(dst)
	require.NotNil(t, l, "Lookup(%v) with a listener advertised", dst)
	return l
}

func announce(t testing.TB, l *Link, port uint16, dst netip.AddrPort) *Ticket {
	t.Helper()
	tk, ok := l.Announce(port, dst)
	require.True(t, ok, "Announce(%d, %v)", port, dst)
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
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
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
	require.NoError(t, err)
	require.True(t, tk.Established(), "Established false against a live listener")
	s, err := ln.Accept()
	require.NoError(t, err)
	return c, s
}

// memfd creates a memfd of size bytes, with a valid header if header and sealed against
// shrinking if sealed.
func memfd(t *testing.T, size int64, header, sealed bool) int {
	t.Helper()
	fd, err := unix.MemfdCreate("smcloop-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	require.NoError(t, err)
	require.NoError(t, unix.Ftruncate(fd, size))
	if header && size >= headerSize {
		b := make([]byte, headerSize)
		writeHeader(b)
		_, err := unix.Pwrite(fd, b, 0)
		require.NoError(t, err)
	}
	if sealed {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
		require.NoError(t, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// fakeListener serves every link to dst's listener name with serve and then closes it;
// the returned channel receives a value each time that is done.
func fakeListener(t *testing.T, dst netip.AddrPort, serve func(c *net.UnixConn)) <-chan struct{} {
	t.Helper()
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + ListenerName(dst), Net: "unixpacket"})
	require.NoError(t, err)
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
	require.NoError(t, err)
	return len(ents)
}

// countTableMaps counts this process's mappings of registration tables (its own and its
// links').
func countTableMaps(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(b), "memfd:"+memfdName)
}

// announced is the ok of Link.Announce.
func announced(_ *Ticket, ok bool) bool { return ok }
