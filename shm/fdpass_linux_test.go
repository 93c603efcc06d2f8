package shm_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/smcloop/smcloop/shm"
	"github.com/smcloop/smcloop/shm/shmtest"
	"golang.org/x/sys/unix"
)

var socketTypes = []struct {
	name string
	typ  int
}{
	{"seqpacket", unix.SOCK_SEQPACKET},
	{"stream", unix.SOCK_STREAM},
}

func newEventfds(t testing.TB, n int) []int {
	t.Helper()
	fds := make([]int, n)
	for i := range fds {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.Fatalf("eventfd: %v", err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		fds[i] = fd
	}
	return fds
}

// TestSendRecvRegionAndDoorbell passes a memfd and an eventfd over a
// socketpair, maps and wraps them on the receiving side, and checks that
// memory and doorbell connect the two sides.
func TestSendRecvRegionAndDoorbell(t *testing.T) {
	for _, st := range socketTypes {
		t.Run(st.name, func(t *testing.T) {
			a, b := socketPair(t, st.typ)
			size := 2 * page
			r := newRegion(t, "shm-test-pass", size)
			d := newDoorbell(t)
			if err := shm.SendFds(a, []byte("dmb"), r.Fd(), d.Fd()); err != nil {
				t.Fatalf("SendFds: %v", err)
			}
			buf := make([]byte, 64)
			n, fds, err := shm.RecvFds(b, buf, 2)
			if err != nil {
				t.Fatalf("RecvFds: %v", err)
			}
			if string(buf[:n]) != "dmb" || len(fds) != 2 {
				t.Fatalf("RecvFds = %q, %d fds; want \"dmb\", 2 fds", buf[:n], len(fds))
			}
			for _, fd := range fds {
				requireCloexec(t, fd)
			}
			m, err := shm.MapRegion(fds[0], size)
			if err != nil {
				unix.Close(fds[1])
				t.Fatalf("MapRegion: %v", err)
			}
			defer m.Close()
			pd, err := shm.DoorbellFromFd(fds[1])
			if err != nil {
				t.Fatalf("DoorbellFromFd: %v", err)
			}
			defer pd.Close()

			copy(m.Bytes()[100:], "written by the receiver")
			if err := pd.Ring(); err != nil {
				t.Fatalf("Ring: %v", err)
			}
			if err := d.Wait(); err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if got := string(r.Bytes()[100:123]); got != "written by the receiver" {
				t.Fatalf("creator reads %q", got)
			}
		})
	}
}

func TestRecvFdsWithoutFds(t *testing.T) {
	for _, st := range socketTypes {
		t.Run(st.name, func(t *testing.T) {
			a, b := socketPair(t, st.typ)
			if err := shm.SendFds(a, []byte("plain")); err != nil {
				t.Fatalf("SendFds: %v", err)
			}
			buf := make([]byte, 16)
			n, fds, err := shm.RecvFds(b, buf, 4)
			if err != nil || string(buf[:n]) != "plain" || len(fds) != 0 {
				t.Fatalf("RecvFds = %q, %v, %v; want \"plain\", no fds, nil", buf[:n], fds, err)
			}
		})
	}
}

// TestRecvFdsTooMany checks that a message with more descriptors than the
// receiver accepts is refused and leaves none of them open.
func TestRecvFdsTooMany(t *testing.T) {
	for _, st := range socketTypes {
		for _, tc := range []struct{ send, max int }{{2, 1}, {3, 1}, {1, 0}, {8, 2}} {
			t.Run(fmt.Sprintf("%s/send%d-max%d", st.name, tc.send, tc.max), func(t *testing.T) {
				a, b := socketPair(t, st.typ)
				if err := shm.SendFds(a, []byte("x"), newEventfds(t, tc.send)...); err != nil {
					t.Fatalf("SendFds: %v", err)
				}
				before := shmtest.OpenFDs(t)
				n, fds, err := shm.RecvFds(b, make([]byte, 8), tc.max)
				if !errors.Is(err, shm.ErrTooManyFds) || fds != nil {
					t.Fatalf("RecvFds(max %d) of %d fds = %d, %v, %v; want ErrTooManyFds", tc.max, tc.send, n, fds, err)
				}
				if after := shmtest.OpenFDs(t); after != before {
					t.Errorf("%d descriptors open after the refused message, want %d", after, before)
				}
				t.Log(err)
			})
		}
	}
}

func TestRecvFdsTruncatedMessage(t *testing.T) {
	a, b := socketPair(t, unix.SOCK_SEQPACKET)
	if err := shm.SendFds(a, []byte("sixteen bytes!!!"), newEventfds(t, 1)...); err != nil {
		t.Fatalf("SendFds: %v", err)
	}
	before := shmtest.OpenFDs(t)
	_, fds, err := shm.RecvFds(b, make([]byte, 4), 1)
	if !errors.Is(err, shm.ErrMsgTruncated) || fds != nil {
		t.Fatalf("RecvFds into a short buffer = %v, %v; want ErrMsgTruncated", fds, err)
	}
	if after := shmtest.OpenFDs(t); after != before {
		t.Errorf("%d descriptors open after the truncated message, want %d", after, before)
	}
}

func TestRecvFdsEOF(t *testing.T) {
	for _, st := range socketTypes {
		t.Run(st.name, func(t *testing.T) {
			a, b := socketPair(t, st.typ)
			a.Close()
			if _, _, err := shm.RecvFds(b, make([]byte, 8), 1); err != io.EOF {
				t.Fatalf("RecvFds after the peer closed: %v, want io.EOF", err)
			}
		})
	}
}

func TestSendFdsEmptyMessage(t *testing.T) {
	a, _ := socketPair(t, unix.SOCK_SEQPACKET)
	if err := shm.SendFds(a, nil, newEventfds(t, 1)...); err == nil {
		t.Fatal("SendFds with an empty message succeeded")
	}
}

func TestPeerCred(t *testing.T) {
	a, b := socketPair(t, unix.SOCK_SEQPACKET)
	cred, err := shm.PeerCred(a)
	if err != nil {
		t.Fatalf("PeerCred: %v", err)
	}
	if int(cred.Pid) != os.Getpid() || int(cred.Uid) != os.Getuid() || int(cred.Gid) != os.Getgid() {
		t.Errorf("PeerCred = pid %d uid %d gid %d; want %d %d %d",
			cred.Pid, cred.Uid, cred.Gid, os.Getpid(), os.Getuid(), os.Getgid())
	}
	if _, err := shm.PeerCred(b); err != nil {
		t.Errorf("PeerCred on the other end: %v", err)
	}
}
