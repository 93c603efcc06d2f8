package ism_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smcloop/smcloop/ism"
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
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the child: %v", err)
	}

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
	if _, err := fmt.Sscanf(line, "ready %x %x %x %d", &gid.Hi, &gid.Ext, &token, &size); err != nil {
		t.Fatalf("child said %q: %v", line, err)
	}

	d := openDevice(t, ism.Config{})
	if err := d.QueryRemoteGID(gid); err != nil {
		t.Fatalf("QueryRemoteGID of the child's device: %v", err)
	}
	if _, err := d.AttachDMB(gid, token^1, size); !errors.Is(err, ism.ErrNoDMB) {
		t.Fatalf("AttachDMB with a wrong token: %v, want ErrNoDMB", err)
	}
	r, err := d.AttachDMB(gid, token, size)
	if err != nil {
		t.Fatalf("AttachDMB of the child's DMB: %v", err)
	}
	defer r.Detach()
	if j := checkPattern(r.Bytes(), 0, childSeed); j >= 0 {
		t.Fatalf("child's DMB differs at byte %d", j)
	}

	// Move a span that ends at the last byte, and ring.
	off, n := size-5000, 5000
	p := make([]byte, n)
	fill(p, parentSeed)
	if err := r.MoveData(off, p, true); err != nil {
		t.Fatalf("MoveData: %v", err)
	}
	if _, err := fmt.Fprintf(stdin, "moved %d %d\n", off, n); err != nil {
		t.Fatalf("telling the child: %v", err)
	}

	go wait()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("child: %v\n%s", err, output())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("child did not finish in 30s:\n%s", output())
	}
	if !strings.Contains(output(), "verified\n") {
		t.Fatalf("child exited without verifying:\n%s", output())
	}

	// The child and its device are gone, yet the mapping keeps the memory alive.
	if j := checkPattern(r.Bytes()[:off], 0, childSeed); j >= 0 {
		t.Errorf("after the child exited, byte %d changed", j)
	}
	if !bytes.Equal(r.Bytes()[off:], p) {
		t.Errorf("after the child exited, the moved span changed")
	}
	if err := d.QueryRemoteGID(gid); !errors.Is(err, ism.ErrUnreachable) {
		t.Errorf("QueryRemoteGID of the exited child: %v, want ErrUnreachable", err)
	}
	if st := d.Stats(); st.AttachesMade != 1 {
		t.Errorf("AttachesMade = %d, want 1", st.AttachesMade)
	}
}

// TestCrossProcessChild is the child of TestCrossProcessAttach; run directly it skips.
func TestCrossProcessChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("child process of TestCrossProcessAttach")
	}
	d, err := ism.Open(ism.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m, err := d.RegisterDMB(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	fill(m.Bytes(), childSeed)
	g := d.GID()
	fmt.Printf("ready %016x %016x %016x %d\n", g.Hi, g.Ext, m.Token(), m.Size())

	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		t.Fatalf("reading stdin: %v (%q)", err, line)
	}
	var off, n int
	if _, err := fmt.Sscanf(line, "moved %d %d", &off, &n); err != nil {
		t.Fatalf("parent said %q: %v", line, err)
	}
	// The parent rang before it wrote to stdin, so the ring is already there.
	if !m.Data.TryConsume() {
		t.Fatal("data doorbell not rung by the parent's MoveData")
	}
	if m.Space.TryConsume() {
		t.Fatal("space doorbell rung, but the parent only moved data")
	}
	mem := m.Bytes()
	if off < 0 || n < 0 || off+n > len(mem) {
		t.Fatalf("span %d+%d outside the DMB", off, n)
	}
	if j := checkPattern(mem[:off], 0, childSeed); j >= 0 {
		t.Fatalf("byte %d before the moved span changed", j)
	}
	if j := checkPattern(mem[off:off+n], 0, parentSeed); j >= 0 {
		t.Fatalf("moved span differs at its byte %d", j)
	}
	if j := checkPattern(mem[off+n:], off+n, childSeed); j >= 0 {
		t.Fatalf("byte %d after the moved span changed", j)
	}
	if st := d.Stats(); st.AttachesServed != 1 {
		t.Fatalf("AttachesServed = %d, want 1", st.AttachesServed)
	}
	fmt.Println("verified")
}
