// Package presence is smcloop's host-local SMC capability signal, the user-space stand-in
// for the kernel's TCP option (kind 254, magic E2D4C3D9) that userspace cannot put in a SYN.
//
// An smcloop listener advertises itself under a listener name in the abstract unix socket
// namespace, "@smcloop-l/<ip>/<port>" (the wildcard address for a wildcard listener): a
// SOCK_SEQPACKET socket that exists while the listener does. Abstract names live in the
// network namespace, the scope of ISM reachability, and vanish with their socket, so a dead
// process leaves nothing behind. Behind the name the listener keeps a registration table in
// shared memory, one slot per client port (registry.go): a dialer links to the listener
// once per process, and for each connection announces its bound local port in the table
// before the SYN; the listener takes the announcement when it accepts the connection.
//
// A dialer speaks CLC only if it found the listener and announced its connection; a
// listener expects CLC on an accepted connection only if it finds that announcement. Each
// side decides before the first byte, from state the other side set up before the
// connection existed, so neither ever waits for a plain peer. See docs/CAPABILITY.md.
package presence

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ListenerName names an smcloop listener bound to addr (its IP may be a wildcard).
func ListenerName(addr netip.AddrPort) string {
	return fmt.Sprintf("smcloop-l/%s/%d", addr.Addr().Unmap(), addr.Port())
}

// ListenerNames are the names under which a listener serving dst could be registered:
// the exact address and both wildcards (a dual-stack [::] listener accepts IPv4 too).
func ListenerNames(dst netip.AddrPort) []string {
	port := dst.Port()
	return []string{
		ListenerName(netip.AddrPortFrom(dst.Addr().Unmap(), port)),
		ListenerName(netip.AddrPortFrom(netip.IPv4Unspecified(), port)),
		ListenerName(netip.AddrPortFrom(netip.IPv6Unspecified(), port)),
	}
}

// absentTTL is how long Lookup trusts an absent answer: a listener that appears is seen
// at most this late, which merely means plain TCP meanwhile.
const absentTTL = 50 * time.Millisecond

var local struct {
	mu      sync.Mutex
	addrs   map[netip.Addr]bool
	fetched time.Time
}

// IsLocal reports whether a connection to ip stays on this host: loopback, unspecified,
// or one of the host's interface addresses (re-read at most once a second on a miss).
// A dialer consults listener names only for local destinations, so a remote server on
// the same port as a local smcloop listener is never sent CLC.
func IsLocal(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	local.mu.Lock()
	defer local.mu.Unlock()
	if local.addrs[ip] {
		return true
	}
	if time.Since(local.fetched) < time.Second {
		return false
	}
	local.fetched = time.Now()
	local.addrs = map[netip.Addr]bool{}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range ifaddrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			local.addrs[pfx.Addr().Unmap()] = true
		}
	}
	return local.addrs[ip]
}

// BindBeforeConnect binds a dialing socket to laddr (or the wildcard address with port
// 0) before connect and returns the port, so the connection can be announced in the
// listener's table before the SYN. SO_REUSEADDR lets a port whose earlier connection sits in
// TIME_WAIT be bound again, as connect's own port choice would.
func BindBeforeConnect(rc syscall.RawConn, network string, laddr netip.AddrPort, reuse bool) (uint16, error) {
	var port uint16
	var serr error
	err := rc.Control(func(fd uintptr) {
		if reuse {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
				return
			}
		}
		var sa unix.Sockaddr
		if network == "tcp4" {
			sa4 := &unix.SockaddrInet4{Port: int(laddr.Port())}
			if laddr.IsValid() {
				sa4.Addr = laddr.Addr().Unmap().As4()
			}
			sa = sa4
		} else {
			sa6 := &unix.SockaddrInet6{Port: int(laddr.Port())}
			if laddr.IsValid() {
				sa6.Addr = laddr.Addr().As16()
			}
			sa = sa6
		}
		if serr = unix.Bind(int(fd), sa); serr != nil {
			return
		}
		// syscall's Getsockname, not x/sys/unix's: the latter asks for SO_PROTOCOL on
		// every inet socket, a second syscall per dial.
		var got syscall.Sockaddr
		if got, serr = syscall.Getsockname(int(fd)); serr != nil {
			return
		}
		switch a := got.(type) {
		case *syscall.SockaddrInet4:
			port = uint16(a.Port)
		case *syscall.SockaddrInet6:
			port = uint16(a.Port)
		}
	})
	if err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, os.NewSyscallError("bind", serr)
	}
	return port, nil
}
