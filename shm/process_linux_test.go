package shm_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/smcloop/smcloop/shm"
	"golang.org/x/sys/unix"
)

// helperEnv makes the re-executed test binary act as the peer process of
// TestCrossProcess.
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
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	conn := fileConn(t, fds[0])
	childEnd := os.NewFile(uintptr(fds[1]), "socket")

	var out bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.ExtraFiles = []*os.File{childEnd}
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	childEnd.Close()
	if err != nil {
		t.Fatalf("starting the child: %v", err)
	}
	var exitErr error
	exited := make(chan struct{})
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() // fails harmlessly once the child has exited
		<-exited
	})

	size := 16 * page
	r := newRegion(t, "shm-test-xproc", size)
	d := newDoorbell(t)
	copy(r.Bytes(), "parent")
	msg := binary.LittleEndian.AppendUint64(nil, uint64(size))
	if err := shm.SendFds(conn, msg, r.Fd(), d.Fd()); err != nil {
		t.Fatalf("SendFds: %v", err)
	}

	rung := make(chan error, 1)
	go func() { rung <- d.Wait() }()
	select {
	case err := <-rung:
		if err != nil {
			t.Fatalf("Wait for the child's ring: %v", err)
		}
	case <-exited:
		// The child cannot exit successfully before it has been rung back.
		d.Close()
		<-rung
		t.Fatalf("child exited before ringing: %v\n%s", exitErr, out.String())
	}
	b := r.Bytes()
	for i := 8; i < size; i++ {
		if b[i] != pattern(i) {
			t.Fatalf("region byte %d = %#x, want %#x", i, b[i], pattern(i))
		}
	}

	buf := make([]byte, 16)
	n, cfds, err := shm.RecvFds(conn, buf, 1)
	if err != nil || len(cfds) != 1 || string(buf[:n]) != "ok" {
		t.Fatalf("receiving the child's doorbell: %q, %v, %v", buf[:n], cfds, err)
	}
	cd, err := shm.DoorbellFromFd(cfds[0])
	if err != nil {
		t.Fatalf("DoorbellFromFd: %v", err)
	}
	defer cd.Close()
	if err := cd.Ring(); err != nil {
		t.Fatalf("ringing the child: %v", err)
	}
	<-exited
	if exitErr != nil {
		t.Fatalf("child: %v\n%s", exitErr, out.String())
	}
}

// TestHelperProcess is the child of TestCrossProcess; run directly it skips.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("child process of TestCrossProcess")
	}
	f := os.NewFile(helperSocketFd, "socket")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatalf("FileConn: %v", err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()

	cred, err := shm.PeerCred(conn)
	if err != nil {
		t.Fatalf("PeerCred: %v", err)
	}
	if int(cred.Pid) != os.Getppid() {
		t.Fatalf("peer pid %d, want the parent %d", cred.Pid, os.Getppid())
	}

	buf := make([]byte, 16)
	n, fds, err := shm.RecvFds(conn, buf, 2)
	if err != nil || n != 8 || len(fds) != 2 {
		t.Fatalf("RecvFds = %d bytes, %v, %v; want 8 bytes and 2 fds", n, fds, err)
	}
	for _, fd := range fds {
		requireCloexec(t, fd)
	}
	size := int(binary.LittleEndian.Uint64(buf))
	r, err := shm.MapRegion(fds[0], size)
	if err != nil {
		unix.Close(fds[1])
		t.Fatalf("MapRegion: %v", err)
	}
	defer r.Close()
	d, err := shm.DoorbellFromFd(fds[1])
	if err != nil {
		t.Fatalf("DoorbellFromFd: %v", err)
	}
	defer d.Close()

	b := r.Bytes()
	if string(b[:6]) != "parent" {
		t.Fatalf("region starts with %q, want \"parent\"", b[:6])
	}
	for i := 8; i < size; i++ {
		b[i] = pattern(i)
	}
	mine, err := shm.NewDoorbell()
	if err != nil {
		t.Fatalf("NewDoorbell: %v", err)
	}
	defer mine.Close()
	if err := d.Ring(); err != nil {
		t.Fatalf("Ring: %v", err)
	}
	if err := shm.SendFds(conn, []byte("ok"), mine.Fd()); err != nil {
		t.Fatalf("SendFds: %v", err)
	}
	if err := mine.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("SetDeadline: %v", err)
	}
	if err := mine.Wait(); err != nil {
		t.Fatalf("waiting for the parent's ring: %v", err)
	}
}
