// Package shmtest holds test helpers for code built on package shm.
package shmtest

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/smcloop/smcloop/shm"
	"github.com/stretchr/testify/require"
)

// OpenFDs returns the number of descriptors this process has open.
func OpenFDs(t testing.TB) int {
	t.Helper()
	n, err := shm.OpenFDs()
	require.NoError(t, err, "OpenFDs")
	return n
}

// WaitParkedInWait returns once a goroutine is parked on the runtime poller ("IO wait")
// inside Doorbell.Wait, which is how tests know that a Wait really blocks before they
// ring, close or move the deadline. It fails the test after 10 s.
func WaitParkedInWait(t testing.TB) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		for g := range strings.SplitSeq(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, "shm.(*Doorbell).Wait(") {
				return
			}
		}
		if time.Now().After(limit) {
			t.Fatalf("no goroutine parked in Doorbell.Wait after 10s:\n%s", buf[:n])
		}
		runtime.Gosched()
	}
}

// WaitParkedIn returns once a goroutine whose stack header contains state (such as
// "[select" or "[chan receive") has frame (such as "ism.(*Bell).Wait(") on its stack.
// It fails the test after 10 s.
func WaitParkedIn(t testing.TB, state, frame string) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		for g := range strings.SplitSeq(string(buf[:n]), "\n\n") {
			if strings.Contains(g, state) && strings.Contains(g, frame) {
				return
			}
		}
		if time.Now().After(limit) {
			t.Fatalf("no goroutine %s in %s after 10s:\n%s", state, frame, buf[:n])
		}
		runtime.Gosched()
	}
}
