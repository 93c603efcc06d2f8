package shm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// maxFdsPerMsg is the kernel's SCM_MAX_FD: the most descriptors one
// SCM_RIGHTS message can carry.
const maxFdsPerMsg = 253

// SendFds sends msg, which must not be empty, with fds attached as one
// SCM_RIGHTS control message. The descriptors stay open in this process. It
// works on SOCK_STREAM and SOCK_SEQPACKET unix sockets; on a stream socket the
// descriptors arrive with the first byte of msg.
func SendFds(c *net.UnixConn, msg []byte, fds ...int) error {
	if len(msg) == 0 {
		return errors.New("shm: SendFds: message must not be empty")
	}
	if len(fds) > maxFdsPerMsg {
		return fmt.Errorf("shm: SendFds: %d descriptors, at most %d fit in one message", len(fds), maxFdsPerMsg)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return err
	}
	if n != len(msg) || oobn != len(oob) {
		return fmt.Errorf("shm: SendFds: sent %d of %d bytes and %d of %d control bytes: %w",
			n, len(msg), oobn, len(oob), io.ErrShortWrite)
	}
	return nil
}

// RecvFds receives one message into buf along with at most maxFds
// descriptors, which arrive close-on-exec (Go's net package receives with
// MSG_CMSG_CLOEXEC on Linux). It returns the number of bytes read and the
// descriptors, which the caller then owns.
//
// If the message carried more than maxFds descriptors or its control data was
// truncated, every descriptor received is closed and the error matches
// [ErrTooManyFds]. If this process had no room to install them (EMFILE), the
// same happens with [ErrFdsDropped], and n still counts the message, which
// arrived whole. If the message did not fit buf (SOCK_SEQPACKET), the same
// happens with [ErrMsgTruncated]. A peer that has closed its end yields
// io.EOF.
func RecvFds(c *net.UnixConn, buf []byte, maxFds int) (n int, fds []int, err error) {
	m, err := ReadFds(c, buf, maxFds)
	switch {
	case errors.Is(err, io.EOF):
		err = io.EOF // plain io.EOF, as from any reader
	case err != nil:
	case m.CTrunc && len(m.Fds) < maxFds && !m.Trunc:
		// Room was there for more: the kernel stopped installing them (scm_detach_fds
		// sets MSG_CTRUNC when the descriptor table is full).
		err = fmt.Errorf("%w (received %d): %w", ErrFdsDropped, len(m.Fds), unix.EMFILE)
	case m.CTrunc:
		err = fmt.Errorf("%w: control data truncated with room for %d (received %d)", ErrTooManyFds, maxFds, len(m.Fds))
	case len(m.Fds) > maxFds:
		err = fmt.Errorf("%w: received %d, want at most %d", ErrTooManyFds, len(m.Fds), maxFds)
	case m.Trunc:
		err = fmt.Errorf("%w: message longer than the %d-byte buffer", ErrMsgTruncated, len(buf))
	case m.N == 0 && !m.hadControl && len(buf) > 0:
		err = io.EOF
	}
	if err != nil {
		closeFds(m.Fds)
		return m.N, nil, err
	}
	return m.N, m.Fds, nil
}

// Msg is one message as [ReadFds] received it, before any judgement: its
// length, the descriptors that came with it (the caller owns them) and the
// kernel's truncation flags.
type Msg struct {
	N      int   // bytes of the message in the buffer
	Fds    []int // descriptors received, close-on-exec
	Trunc  bool  // MSG_TRUNC: the message was longer than the buffer (SOCK_SEQPACKET)
	CTrunc bool  // MSG_CTRUNC: control data did not fit, or the descriptor table was full

	hadControl bool // any control data arrived
}

// ReadFds receives one message into buf with room for maxFds descriptors
// (at least one, so that a message carrying some is noticed rather than
// silently stripped) and reports what arrived, for protocols that judge
// a message by rules of their own; [RecvFds] is ReadFds with the usual
// rules. The descriptors in the returned Msg are the caller's even when err
// is not nil (io.EOF on a SOCK_SEQPACKET socket is an empty message or the
// end of the connection, and descriptors may come with the former). A parse
// error of the control data is returned with the descriptors found before it.
func ReadFds(c *net.UnixConn, buf []byte, maxFds int) (Msg, error) {
	if maxFds < 0 || maxFds > maxFdsPerMsg {
		return Msg{}, fmt.Errorf("shm: ReadFds: maxFds %d out of range [0, %d]", maxFds, maxFdsPerMsg)
	}
	oob := make([]byte, unix.CmsgSpace(max(maxFds, 1)*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil && !errors.Is(err, io.EOF) {
		return Msg{}, err // n and oobn may be -1: nothing was received
	}
	fds, perr := parseRights(oob[:oobn])
	m := Msg{N: n, Fds: fds, Trunc: flags&unix.MSG_TRUNC != 0, CTrunc: flags&unix.MSG_CTRUNC != 0, hadControl: oobn > 0}
	if err == nil {
		err = perr
	}
	return m, err
}

// parseRights returns every descriptor in the SCM_RIGHTS messages of oob,
// skipping other control messages. On a parse error it still returns the
// descriptors found before it, so that they can be closed.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("shm: parsing control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return fds, fmt.Errorf("shm: parsing SCM_RIGHTS: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// PeerCred returns the credentials (SO_PEERCRED) of the process at the other
// end of a connected unix socket, as they were when the connection was made.
func PeerCred(c *net.UnixConn) (*Cred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var uc *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		uc, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, os.NewSyscallError("getsockopt SO_PEERCRED", serr)
	}
	return &Cred{Pid: uc.Pid, Uid: uc.Uid, Gid: uc.Gid}, nil
}
