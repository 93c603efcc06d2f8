package peercred

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// TCP connections do not carry SO_PEERCRED. Both ends of a connection to a local address
// are sockets of this host, so the kernel's socket diagnostics (NETLINK_SOCK_DIAG, the
// interface of `ss`) can look the far end up by its four-tuple and report the uid that
// owns it: one request and one reply, answered within the sendmsg, for any caller.

// Layouts from <linux/inet_diag.h> and <linux/netlink.h>.
const (
	nlmsgHdrLen     = 16
	diagReqLen      = 56 // struct inet_diag_req_v2
	diagMsgLen      = 72 // struct inet_diag_msg
	diagMsgUIDOff   = 64 // inet_diag_msg.idiag_uid
	diagMsgInodeOff = 68 // inet_diag_msg.idiag_inode
	tcpStatesAll    = 0xffffffff
)

// ErrNoSocket is returned when no socket of this host has the far end's address: the
// address is not local, or the far end closed.
var ErrNoSocket = errors.New("no local socket at the other end of the connection")

// Socket identifies the far end of a local TCP connection.
type Socket struct {
	UID   uint32
	Inode uint32
}

// diagConn is one NETLINK_SOCK_DIAG socket; requests on it are serialised.
type diagConn struct {
	fd  int
	seq uint32
	req [nlmsgHdrLen + diagReqLen]byte
	buf [4096]byte
}

// diagPool keeps a few netlink sockets for concurrent handshakes.
var diagPool = make(chan *diagConn, 8)

func getDiag() (*diagConn, error) {
	select {
	case d := <-diagPool:
		return d, nil
	default:
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, os.NewSyscallError("socket(NETLINK_SOCK_DIAG)", err)
	}
	// Connected to the kernel (port 0), requests and replies go by write and read, with no
	// socket address to allocate per call. A connected netlink socket takes unicast only
	// from its peer (netlink_getsockbyportid refuses any other sender), and sending to
	// another process's NETLINK_SOCK_DIAG socket needs CAP_NET_ADMIN anyway (the family
	// lacks NL_CFG_F_NONROOT_SEND): no other process can queue a reply. parse also
	// matches the request's sequence number.
	if err := unix.Connect(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("connect(NETLINK_SOCK_DIAG)", err)
	}
	return &diagConn{fd: fd}, nil
}

func putDiag(d *diagConn, broken bool) {
	if !broken {
		select {
		case diagPool <- d:
			return
		default:
		}
	}
	unix.Close(d.fd)
}

// TCPPeer returns the owner of the socket at the other end of the TCP connection from
// local to remote, both addresses of this host.
func TCPPeer(local, remote netip.AddrPort) (Socket, error) {
	d, err := getDiag()
	if err != nil {
		return Socket{}, err
	}
	// The far end's own view: its local address is our remote one. A dual-stack socket
	// may hold an IPv4 connection as a mapped IPv6 one; the kernel's IPv4 lookup finds
	// it either way, so IPv4 is asked as IPv4.
	s, err := d.lookup(remote, local)
	putDiag(d, err != nil && !errors.Is(err, ErrNoSocket))
	return s, err
}

func (d *diagConn) lookup(src, dst netip.AddrPort) (Socket, error) {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	family := uint8(unix.AF_INET6)
	if src.Addr().Is4() && dst.Addr().Is4() {
		family = unix.AF_INET
	}
	d.seq++
	req := &d.req // in d: a request on the stack escapes under the race detector
	clear(req[:])
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], d.seq)
	r := req[nlmsgHdrLen:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], tcpStatesAll)
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putAddr(id[4:20], src.Addr(), family)
	putAddr(id[20:36], dst.Addr(), family)
	ne.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], 0xffffffff)
	if _, err := unix.Write(d.fd, req[:]); err != nil {
		return Socket{}, os.NewSyscallError("write(NETLINK_SOCK_DIAG)", err)
	}
	// The kernel answers a single-socket request while handling the write, so the reply
	// is queued by now: the read (of a non-blocking socket) never waits.
	for {
		n, err := unix.Read(d.fd, d.buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Socket{}, os.NewSyscallError("read(NETLINK_SOCK_DIAG)", err)
		}
		s, done, err := d.parse(d.buf[:n])
		if done || err != nil {
			return s, err
		}
	}
}

// parse reads one datagram of replies. done reports that the answer to the current
// request was found; replies to earlier requests (none are expected) are skipped.
func (d *diagConn) parse(b []byte) (s Socket, done bool, err error) {
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		l := int(ne.Uint32(b[0:]))
		if l < nlmsgHdrLen || l > len(b) {
			return Socket{}, true, errors.New("peercred: malformed netlink reply")
		}
		typ, seq, body := ne.Uint16(b[4:]), ne.Uint32(b[8:]), b[nlmsgHdrLen:l]
		b = b[min((l+3)&^3, len(b)):]
		if seq != d.seq {
			continue
		}
		switch typ {
		case unix.NLMSG_ERROR:
			if len(body) < 4 {
				return Socket{}, true, errors.New("peercred: short netlink error")
			}
			errno := -int32(ne.Uint32(body))
			if errno == 0 {
				continue
			}
			if unix.Errno(errno) == unix.ENOENT {
				return Socket{}, true, ErrNoSocket
			}
			return Socket{}, true, fmt.Errorf("peercred: sock_diag: %w", unix.Errno(errno))
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(body) < diagMsgLen {
				return Socket{}, true, errors.New("peercred: short sock_diag reply")
			}
			return Socket{UID: ne.Uint32(body[diagMsgUIDOff:]), Inode: ne.Uint32(body[diagMsgInodeOff:])}, true, nil
		case unix.NLMSG_DONE:
			return Socket{}, true, ErrNoSocket
		}
	}
	return Socket{}, false, nil
}

func putAddr(b []byte, a netip.Addr, family uint8) {
	if family == unix.AF_INET {
		v4 := a.As4()
		copy(b, v4[:])
		return
	}
	v6 := a.As16()
	copy(b, v6[:])
}
