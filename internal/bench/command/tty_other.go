//go:build !linux

package command

import "os"

// isTerminal reports whether f is a character device, which is where a terminal is
// found (this guess takes /dev/null for one too).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
