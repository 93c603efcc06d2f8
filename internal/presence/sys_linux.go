package presence

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The signal's system calls; sys_other.go has the same functions where there is no
// signal (supported is false there, and nothing reaches them).

// supported reports whether this system has the signal.
const supported = true

// BindBeforeConnect binds a dialing socket to laddr (or the wildcard address) before
// connect and returns the port, so the connection can be announced in the listener's table
// before the SYN. Without a port in laddr it binds a random free port of the local range
// (ports_linux.go), and only if a few tries find none does it bind port 0, with
// SO_REUSEADDR if reuse is set: that lets a port whose earlier connection sits in TIME_WAIT
// be bound again, as connect's own port choice would.
func BindBeforeConnect(rc syscall.RawConn, network string, laddr netip.AddrPort, reuse bool) (uint16, error) {
	var port uint16
	var serr error
	err := rc.Control(func(fd uintptr) {
		sockaddr := func(port int) unix.Sockaddr {
			if network == "tcp4" {
				sa4 := &unix.SockaddrInet4{Port: port}
				if laddr.IsValid() {
					sa4.Addr = laddr.Addr().Unmap().As4()
				}
				return sa4
			}
			sa6 := &unix.SockaddrInet6{Port: port}
			if laddr.IsValid() {
				sa6.Addr = laddr.Addr().As16()
			}
			return sa6
		}
		if laddr.Port() == 0 {
			r := localPorts()
			for range portTries {
				p := r.pick()
				if p == 0 {
					break
				}
				switch err := unix.Bind(int(fd), sockaddr(p)); err {
				case nil:
					port = uint16(p)
					return
				case unix.EADDRINUSE, unix.EACCES:
					continue // held by a socket (or below an unprivileged bind's ports)
				default:
					serr = err
					return
				}
			}
		}
		if reuse {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
				return
			}
		}
		if serr = unix.Bind(int(fd), sockaddr(int(laddr.Port()))); serr != nil {
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

// peerOpen reports whether the listener end of a link is open: a non-blocking,
// zero-length MSG_PEEK finds nothing to read. EOF, a pending message (a listener sends
// none after its hello) and errors all mean it is not.
func peerOpen(fd int) bool {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if errno != unix.EINTR {
			return errno == unix.EAGAIN
		}
	}
}

// socketFile returns the device and inode of the socket file at path, which name a
// unix listener's socket (a later socket at the same path has another inode).
func socketFile(path string) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, &net.OpError{Op: "stat", Net: "unix", Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return 0, 0, fmt.Errorf("presence: %s is not a socket", path)
	}
	return st.Dev, st.Ino, nil
}

func closeFd(fd int) { unix.Close(fd) }
