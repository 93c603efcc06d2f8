// Package presence is smcloop's host-local SMC capability signal, the user-space stand-in
// for the kernel's TCP option (kind 254, magic E2D4C3D9) that userspace cannot put in a SYN.
//
// A name in the abstract unix socket namespace is present while some process holds a
// datagram socket bound to it. Abstract names live in the network namespace, which is the
// scope of ISM reachability, and vanish with their socket, so a dead process leaves
// nothing behind. Two kinds of names are used:
//
//   - a Listener name per smcloop listening address, "@smcloop-l/<ip>/<port>" (the
//     wildcard address for a wildcard listener): "an SMC-capable listener is here";
//   - a Dialer name per smcloop dialing socket, "@smcloop-d/<local port>/<dst ip>/<dst
//     port>", bound BEFORE the SYN is sent: "this client connection will speak CLC".
//
// A dialer speaks CLC only if it found the listener's name and bound its own; a listener
// expects CLC on an accepted connection only if the dialer's name for that exact
// connection is present. Each side decides before the first byte, from state the other
// side set up before the connection existed, so neither ever waits for a plain peer.
//
// Probe costs one non-blocking sendto of an empty datagram on a process-wide socket:
// ECONNREFUSED means absent, success or EAGAIN (the owner never reads) means present.
package presence

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Entry is a held name.
type Entry struct {
	mu   sync.Mutex
	fd   int
	name string
}

// Register binds name (without the leading '@') for as long as the entry lives; a
// long-lived name should set smallQueue, so that the probe datagrams it never reads
// cannot pile up (a dialer name is probed once). It fails with EADDRINUSE if another
// socket holds the name.
func Register(name string, smallQueue bool) (*Entry, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("presence: socket: %w", err)
	}
	if smallQueue {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@" + name}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("presence: bind %q: %w", name, err)
	}
	return &Entry{fd: fd, name: name}, nil
}

// Name is the registered name.
func (e *Entry) Name() string { return e.name }

// Close releases the name. Idempotent.
func (e *Entry) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fd < 0 {
		return nil
	}
	err := unix.Close(e.fd)
	e.fd = -1
	return err
}

var (
	probeOnce sync.Once
	probeFd   int
	probeErr  error
)

// Probe reports whether name is present.
func Probe(name string) (bool, error) {
	probeOnce.Do(func() {
		probeFd, probeErr = unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	})
	if probeErr != nil {
		return false, fmt.Errorf("presence: probe socket: %w", probeErr)
	}
	err := unix.Sendto(probeFd, nil, unix.MSG_DONTWAIT, &unix.SockaddrUnix{Name: "@" + name})
	switch {
	case err == nil, errors.Is(err, syscall.EAGAIN):
		return true, nil
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("presence: probe %q: %w", name, err)
}

// ListenerName names an smcloop listener bound to addr (its IP may be a wildcard).
func ListenerName(addr netip.AddrPort) string {
	return fmt.Sprintf("smcloop-l/%s/%d", addr.Addr().Unmap(), addr.Port())
}

// DialerName names an smcloop dialing socket with local port lport connecting to dst.
func DialerName(lport uint16, dst netip.AddrPort) string {
	return fmt.Sprintf("smcloop-d/%d/%s/%d", lport, dst.Addr().Unmap(), dst.Port())
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

// ListenerPresent reports whether an smcloop listener is registered for dst.
//
// An absent answer is remembered for absentTTL, so dialing a plain server (or a listener
// that withdrew its signal under handshake limitation) costs no probes per connection.
// Only absence is cached: a listener that appears is seen at most absentTTL late, which
// merely means plain TCP meanwhile; a cached presence could send CLC to a plain server
// that took over the port.
func ListenerPresent(dst netip.AddrPort) bool {
	now := time.Now()
	absent.mu.Lock()
	until, ok := absent.m[dst]
	absent.mu.Unlock()
	if ok && now.Before(until) {
		return false
	}
	for _, n := range ListenerNames(dst) {
		if ok, _ := Probe(n); ok {
			return true
		}
	}
	absent.mu.Lock()
	if absent.m == nil || len(absent.m) > 4096 {
		absent.m = make(map[netip.AddrPort]time.Time)
	}
	absent.m[dst] = now.Add(absentTTL)
	absent.mu.Unlock()
	return false
}

// absentTTL is how long ListenerPresent trusts an absent answer.
const absentTTL = 50 * time.Millisecond

var absent struct {
	mu sync.Mutex
	m  map[netip.AddrPort]time.Time
}

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
// 0) before connect and returns the port, so the dialer name can be registered before
// the SYN. SO_REUSEADDR lets a port whose earlier connection sits in
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
		var got unix.Sockaddr
		if got, serr = unix.Getsockname(int(fd)); serr != nil {
			return
		}
		switch a := got.(type) {
		case *unix.SockaddrInet4:
			port = uint16(a.Port)
		case *unix.SockaddrInet6:
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
