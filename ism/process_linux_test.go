package ism_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smcloop/smcloop/ism"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv makes the re-executed test binary act as the peer process of
// TestCrossProcessAttach.
const childEnv = "ISM_TEST_CHILD_DEVICE"

// Seeds of the patterns written by the child (its whole DMB) and by the parent (one span).
const (
	childSeed  = 0xC1
	parentSeed = 0x9A
)

// TestCrossProcessAttach attaches a DMB owned by another process: the GID reaches the
// child's device through its abstract socket, the memfd and doorbells arrive by
// SCM_RIGHTS after the SO_PEERCRED check, and both processes see each other's writes
// and rings.
func TestCrossProcessAttach(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrossProcessChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start(), "starting the child")

	// Everything the child prints is collected; its "ready" line is handed over.
	var (
		outMu sync.Mutex
		out   strings.Builder
	)
	ready := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			line := s.Text()
			outMu.Lock()
			out.WriteString(line + "\n")
			outMu.Unlock()
			if strings.HasPrefix(line, "ready ") {
				ready <- line
			}
		}
	}()
	output := func() string {
		outMu.Lock()
		defer outMu.Unlock()
		return out.String() + stderr.String()
	}
	exited := make(chan error, 1)
	var waitOnce sync.Once
	wait := func() { waitOnce.Do(func() { <-readDone; exited <- cmd.Wait() }) }
	t.Cleanup(func() {
		stdin.Close() // a child still waiting on stdin sees EOF and exits
		cmd.Process.Kill()
		wait()
	})

	var line string
	select {
	case line = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatalf("child did not report its DMB in 30s:\n%s", output())
	}
	var gid ism.GID
	var token uint64
	var size int
	require.NoError(t, errOf(fmt.Sscanf(line, "ready %x %x %x %d", &gid.Hi, &gid.Ext, &token, &size)), "child said %q", line)

	d := openDevice(t, ism.Config{})
	require.NoError(t, d.QueryRemoteGID(gid), "QueryRemoteGID of the child's device")
	require.ErrorIs(t, errOf(d.AttachDMB(gid, token^1, size)), ism.ErrNoDMB, "AttachDMB with a wrong token")
	r, err := d.AttachDMB(gid, token, size)
	require.NoError(t, err, "AttachDMB of the child's DMB")
	defer r.Detach()
	require.Equal(t, -1, checkPattern(r.Bytes(), 0, childSeed), "first byte where the child's DMB differs")

	// Move a span that ends at the last byte, and ring.
	off, n := size-5000, 5000
	p := make([]byte, n)
	fill(p, parentSeed)
	require.NoError(t, r.MoveData(off, p, true), "MoveData")
	require.NoError(t, errOf(fmt.Fprintf(stdin, "moved %d %d\n", off, n)), "telling the child")

	go wait()
	select {
	case err := <-exited:
		require.NoError(t, err, "child:\n%s", output())
	case <-time.After(30 * time.Second):
		t.Fatalf("child did not finish in 30s:\n%s", output())
	}
	require.Contains(t, output(), "verified\n", "child exited without verifying")

	// The child and its device are gone, yet the mapping keeps the memory alive.
	assert.Equal(t, -1, checkPattern(r.Bytes()[:off], 0, childSeed), "first byte changed after the child exited")
	assert.Equal(t, p, r.Bytes()[off:], "the moved span after the child exited")
	assert.ErrorIs(t, d.QueryRemoteGID(gid), ism.ErrUnreachable, "QueryRemoteGID of the exited child")
	assert.Equal(t, uint64(1), d.Stats().AttachesMade, "AttachesMade")
}

// TestCrossProcessChild is the child of TestCrossProcessAttach; run directly it skips.
func TestCrossProcessChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("child process of TestCrossProcessAttach")
	}
	d, err := ism.Open(ism.Config{})
	require.NoError(t, err)
	defer d.Close()
	m, err := d.RegisterDMB(64 << 10)
	require.NoError(t, err)
	fill(m.Bytes(), childSeed)
	g := d.GID()
	fmt.Printf("ready %016x %016x %016x %d\n", g.Hi, g.Ext, m.Token(), m.Size())

	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	require.NoError(t, err, "reading stdin (%q)", line)
	var off, n int
	require.NoError(t, errOf(fmt.Sscanf(line, "moved %d %d", &off, &n)), "parent said %q", line)
	// The parent rang before it wrote to stdin, so the ring is already there.
	require.True(t, m.Data.TryConsume(), "data doorbell not rung by the parent's MoveData")
	require.False(t, m.Space.TryConsume(), "space doorbell rung, but the parent only moved data")
	mem := m.Bytes()
	require.True(t, off >= 0 && n >= 0 && off+n <= len(mem), "span %d+%d outside the DMB", off, n)
	require.Equal(t, -1, checkPattern(mem[:off], 0, childSeed), "first byte changed before the moved span")
	require.Equal(t, -1, checkPattern(mem[off:off+n], 0, parentSeed), "first byte where the moved span differs")
	require.Equal(t, -1, checkPattern(mem[off+n:], off+n, childSeed), "first byte changed after the moved span")
	require.Equal(t, uint64(1), d.Stats().AttachesServed, "AttachesServed")
	fmt.Println("verified")
}
