//go:build unix

package umltest

import (
	"os"
	"path/filepath"
	"syscall"
)

// lockMachine takes the machine-wide lock that lets one Run at a time boot its
// instances, whichever package's test binary calls it (go test runs packages in
// parallel): two pairs of instances at once on a small host lose enough of their
// L2TPv3/UDP frames to stall soft-RoCE's retransmissions. The lock is an flock(2), so
// it goes with the process that held it, however that ends.
func lockMachine() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "smcloop-umltest.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
