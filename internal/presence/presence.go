// Package presence is smcloop's host-local SMC capability signal, the user-space stand-in
// for the kernel's TCP option (kind 254, magic E2D4C3D9) that userspace cannot put in a SYN.
//
// An smcloop listener advertises itself under a listener name in the abstract unix socket
// namespace, "@smcloop-l/<ip>/<port>" (the wildcard address for a wildcard listener): a
// SOCK_SEQPACKET socket that exists while the listener does. Abstract names live in the
// network namespace, the scope of ISM reachability, and vanish with their socket, so a dead
// process leaves nothing behind. Behind the name the listener keeps a registration table in
// shared memory, one slot per client port (table.go): a dialer links to the listener
// once per process, and for each connection announces its bound local port in the table
// before the SYN; the listener takes the announcement when it accepts the connection.
//
// The files follow the signal's parts: wire.go is the table's and the hello's layout,
// table.go the shared table, advert.go the listener side, lookup.go the dialer side,
// announce.go the hook a dialer runs before connect, unixsock.go the signal for unix
// sockets, and sys_linux.go the system calls (sys_other.go: none, no signal).
//
// A dialer speaks CLC only if it found the listener and announced its connection; a
// listener expects CLC on an accepted connection only if it finds that announcement. Each
// side decides before the first byte, from state the other side set up before the
// connection existed, so neither ever waits for a plain peer. See docs/CAPABILITY.md.
package presence

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"
)

// ErrUnsupported reports a system where the signal cannot work: every system but Linux
// (it needs abstract unix socket names, memfd seals and SO_PEERCRED). There Advertise and
// AdvertiseUnix fail with it, Lookup finds no listener and LookupUnix no process, so a
// dialer connects plain TCP and a listener expects no CLC. It matches
// errors.ErrUnsupported.
var ErrUnsupported = fmt.Errorf("presence: no SMC capability signal on %s: %w", runtime.GOOS, errors.ErrUnsupported)

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
