package shm_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop/shm"
)

// helperEnv makes the re-executed test binary act as the peer process of
// TestCrossProcess ("1") or of TestCrossProcessBlockingPeer ("blocking").
const helperEnv = "SHM_TEST_HELPER_PROCESS"

// helperSocketFd is where the child finds its end of the socketpair
// (the first of cmd.ExtraFiles).
const helperSocketFd = 3

// pattern is what the child writes at offset i of the parent's region.
func pattern(i int) byte { return byte(i*13 + 5) }

// TestCrossProcess runs a child process that receives a region and a
// doorbell from this process, writes into the region and rings, then sends a
// doorbell of its own and waits for this process to ring it.
func TestCrossProcess(t *testing.T) {
	c := startHelper(t, "TestHelperProcess", "1")
	conn, exited, out := c.conn, c.exited, c.out

	size := 16 * page
	r := newRegion(t, "shm-test-xproc", size)
	d := newDoorbell(t)
	copy(r.Bytes(), "parent")
	msg := binary.LittleEndian.AppendUint64(nil, uint64(size))
	require.NoError(t, shm.SendFds(conn, msg, r.Fd(), d.Fd()), "SendFds")

	rung := make(chan error, 1)
	go func() { rung <- d.Wait() }()
	select {
	case err := <-rung:
		require.NoError(t, err, "Wait for the child's ring")
	case <-exited:
		// The child cannot exit successfully before it has been rung back.
		d.Close()
		<-rung
		t.Fatalf("child exited before ringing: %v\n%s", c.exitErr, out.String())
	}
	b := r.Bytes()
	want := make([]byte, size)
	for i := range want {
		want[i] = pattern(i)
	}
	require.Equal(t, want[8:], b[8:size], "region bytes the child wrote")

	buf := make([]byte, 16)
	n, cfds, err := shm.RecvFds(conn, buf, 1)
	require.NoError(t, err, "receiving the child's doorbell")
	require.Equal(t, "ok", string(buf[:n]), "receiving the child's doorbell")
	require.Len(t, cfds, 1, "receiving the child's doorbell")
	cd, err := shm.DoorbellFromFd(cfds[0])
	require.NoError(t, err, "DoorbellFromFd")
	defer cd.Close()
	require.NoError(t, cd.Ring(), "ringing the child")
	<-exited
	require.NoError(t, c.exitErr, "child:\n%s", out.String())
}

// helper is a child process started by startHelper.
type helper struct {
	conn    *net.UnixConn // this end of a SOCK_SEQPACKET socketpair with the child
	out     *bytes.Buffer // the child's output; read it only once the child exited
	exited  chan struct{} // closed once the child has been waited for
	exitErr error         // set before exited closes
}

// startHelper runs the test binary again as a child that runs only the test named run,
// with helperEnv set to mode, and gives it the other end of conn. The child is killed
// (if still running) and waited for when the test ends.
func startHelper(t *testing.T, run, mode string) *helper {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err, "socketpair")
	h := &helper{conn: fileConn(t, fds[0]), out: new(bytes.Buffer), exited: make(chan struct{})}
	childEnd := os.NewFile(uintptr(fds[1]), "socket")
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.ExtraFiles = []*os.File{childEnd}
	cmd.Stdout, cmd.Stderr = h.out, h.out
	err = cmd.Start()
	childEnd.Close()
	require.NoError(t, err, "starting the child")
	go func() {
		h.exitErr = cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() // fails harmlessly once the child has exited
		<-h.exited
	})
	return h
}

// helperConn is the child's end of its socketpair with the test process.
func helperConn(t *testing.T) *net.UnixConn {
	t.Helper()
	f := os.NewFile(helperSocketFd, "socket")
	c, err := net.FileConn(f)
	f.Close()
	require.NoError(t, err, "FileConn")
	return c.(*net.UnixConn)
}

// TestCrossProcessBlockingPeer: a child process receives this process's doorbell and
// turns hostile: it clears O_NONBLOCK on the ringing end (on the open file description
// both processes share), fills it, and leaves a thread blocked in a send on it. Rings,
// the owner's and a peer's, still return at once, and the owner still wakes.
func TestCrossProcessBlockingPeer(t *testing.T) {
	c := startHelper(t, "TestHelperBlockingPeer", "blocking")
	d := newDoorbell(t)
	p := peerBell(t, d)
	require.NoError(t, shm.SendFds(c.conn, []byte("bell"), d.Fd()))

	buf := make([]byte, 64)
	n, _, err := shm.RecvFds(c.conn, buf, 0)
	require.NoError(t, err, "waiting for the child's report")
	require.Equal(t, "blocking", string(buf[:n]), "the child's report")
	fl, err := unix.FcntlInt(uintptr(d.Fd()), unix.F_GETFL, 0)
	require.NoError(t, err)
	require.Zero(t, fl&unix.O_NONBLOCK, "the child's fcntl did not reach the shared description")

	within(t, "rings on a doorbell a peer made blocking and full", func() {
		for range 10000 {
			if !assert.NoError(t, p.Ring()) || !assert.NoError(t, d.Ring()) {
				return
			}
		}
	})
	within(t, "Wait", func() { assert.NoError(t, d.Wait()) })
	within(t, "taking the queued rings", func() { drainAll(t, d) })

	// Closing the doorbell ends the child's blocked send; the child then exits.
	require.NoError(t, d.Close())
	require.NoError(t, p.Ring(), "a ring after the owner closed")
	c.conn.Close()
	select {
	case <-c.exited:
	case <-time.After(watchdog):
		t.Fatal("the child did not exit")
	}
	require.NoError(t, c.exitErr, "child:\n%s", c.out)
}

// TestHelperBlockingPeer is the child of TestCrossProcessBlockingPeer; run directly it
// skips.
func TestHelperBlockingPeer(t *testing.T) {
	if os.Getenv(helperEnv) != "blocking" {
		t.Skip("child process of TestCrossProcessBlockingPeer")
	}
	conn := helperConn(t)
	defer conn.Close()
	buf := make([]byte, 16)
	_, fds, err := shm.RecvFds(conn, buf, 1)
	require.NoError(t, err)
	require.Len(t, fds, 1)
	bell := fds[0]
	setBlocking(t, bell)
	fill(t, bell)
	sent := make(chan error, 1)
	go func() {
		for {
			err := unix.Send(bell, []byte{1}, unix.MSG_NOSIGNAL) // blocks: the end is full
			if err != unix.EINTR {
				sent <- err
				return
			}
		}
	}()
	require.NoError(t, shm.SendFds(conn, []byte("blocking")))
	// The parent closes its doorbell, which ends the blocked send, then hangs up.
	err = <-sent
	assert.True(t, err == nil || err == unix.EPIPE, "the blocked send ended with %v", err)
	n, err := conn.Read(buf)
	assert.True(t, n == 0 || err != nil, "the parent said %q", buf[:n])
}

// TestHelperProcess is the child of TestCrossProcess; run directly it skips.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("child process of TestCrossProcess")
	}
	conn := helperConn(t)
	defer conn.Close()

	cred, err := shm.PeerCred(conn)
	require.NoError(t, err, "PeerCred")
	require.Equal(t, os.Getppid(), int(cred.Pid), "peer pid: the parent")

	buf := make([]byte, 16)
	n, fds, err := shm.RecvFds(conn, buf, 2)
	require.NoError(t, err, "RecvFds")
	require.Equal(t, 8, n, "RecvFds: bytes")
	require.Len(t, fds, 2, "RecvFds: descriptors")
	for _, fd := range fds {
		requireCloexec(t, fd)
	}
	size := int(binary.LittleEndian.Uint64(buf))
	r, err := shm.MapRegion(fds[0], size)
	if err != nil {
		unix.Close(fds[1])
	}
	require.NoError(t, err, "MapRegion")
	defer r.Close()
	d, err := shm.DoorbellFromFd(fds[1])
	require.NoError(t, err, "DoorbellFromFd")
	defer d.Close()

	b := r.Bytes()
	require.Equal(t, "parent", string(b[:6]), "the region's first bytes")
	for i := 8; i < size; i++ {
		b[i] = pattern(i)
	}
	mine, err := shm.NewDoorbell()
	require.NoError(t, err, "NewDoorbell")
	defer mine.Close()
	require.NoError(t, d.Ring(), "Ring")
	require.NoError(t, shm.SendFds(conn, []byte("ok"), mine.Fd()), "SendFds")
	require.NoError(t, mine.SetDeadline(time.Now().Add(time.Minute)), "SetDeadline")
	require.NoError(t, mine.Wait(), "waiting for the parent's ring")
}
