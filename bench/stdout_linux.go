package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// separateStdout keeps shmipc-go's package-level log, which writes its warnings to file
// descriptor 1 (os.Stdout as it was when the package was initialised), out of this
// program's output: descriptor 1 becomes a copy of stderr, and os.Stdout a new
// descriptor for the original standard output. The results, and a server child's
// protocol lines, go to os.Stdout as before. The session logs go to stderr anyway
// (shmipcConfig), where the fallback warning is watched for.
func separateStdout() error {
	fd, err := unix.FcntlInt(1, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return fmt.Errorf("duplicating stdout: %w", err)
	}
	if err := unix.Dup3(2, 1, 0); err != nil {
		unix.Close(fd)
		return fmt.Errorf("pointing descriptor 1 at stderr: %w", err)
	}
	os.Stdout = os.NewFile(uintptr(fd), "/dev/stdout")
	return nil
}
