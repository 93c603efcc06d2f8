//go:build !linux

package bench

import "testing"

// childProcesses cannot list children on this system; it reports none.
func childProcesses(t *testing.T) []string { return nil }
