//go:build !linux

package command

import (
	"os"
	"testing"
)

// openPTY skips the test: opening a pseudo-terminal pair by hand (/dev/ptmx,
// TIOCSPTLCK, TIOCGPTN) is Linux's interface.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Skip("pseudo-terminal test only on Linux")
	return nil, nil
}
