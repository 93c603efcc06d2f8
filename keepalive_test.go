package smcloop

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// keepAliveOn reads SO_KEEPALIVE of the TCP connection under c.
func keepAliveOn(t *testing.T, c *Conn) bool {
	t.Helper()
	rc, err := c.tcp.Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return v != 0
}

// TestKeepAliveOnlyOnFallback: keep-alive (net's default, or the caller's setting)
// applies to connections over TCP; an SMC connection's TCP connection has none.
func TestKeepAliveOnlyOnFallback(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, s := dialAccept(t, ln, Config{})
	if !c.UsingSMC() || keepAliveOn(t, c) || keepAliveOn(t, s) {
		t.Fatalf("SMC connection: smc %v, keep-alive client %v server %v", c.UsingSMC(), keepAliveOn(t, c), keepAliveOn(t, s))
	}

	// A plain client of the smcloop listener gets the listener's default keep-alive.
	pc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if ps := acceptOne(t, ln); ps.UsingSMC() || !keepAliveOn(t, ps) {
		t.Fatalf("plain client's connection: smc %v, keep-alive %v", ps.UsingSMC(), keepAliveOn(t, ps))
	}

	// An smcloop client of a plain server gets the dialer's keep-alive, default or off.
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, tc := range []struct {
		idle int
		want bool
	}{{0, true}, {-1, false}} {
		d := Dialer{}
		d.NetDialer.KeepAlive = -1
		if tc.idle == 0 {
			d.NetDialer.KeepAlive = 0
		}
		fc, err := d.Dial("tcp", plain.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if fc.UsingSMC() || keepAliveOn(t, fc) != tc.want {
			t.Fatalf("KeepAlive %d to a plain server: smc %v keep-alive %v, want %v", tc.idle, fc.UsingSMC(), keepAliveOn(t, fc), tc.want)
		}
		fc.Close()
	}
}
