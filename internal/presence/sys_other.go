//go:build !linux

package presence

import (
	"net/netip"
	"os"
	"syscall"
)

// No system here has the signal: Advertise, AdvertiseUnix, Lookup and LookupUnix report
// ErrUnsupported or no listener before anything below could be reached.

const supported = false

// BindBeforeConnect fails with ErrUnsupported: a dialer here connects plain TCP and
// binds, if at all, through its own net.Dialer.
func BindBeforeConnect(rc syscall.RawConn, network string, laddr netip.AddrPort, reuse bool) (uint16, error) {
	return 0, ErrUnsupported
}

// peerOpen reports false: no link is ever open here.
func peerOpen(fd int) bool { return false }

func socketFile(path string) (dev, ino uint64, err error) { return 0, 0, ErrUnsupported }

// closeFd closes a descriptor through os.File, which knows this system's kind of handle.
func closeFd(fd int) {
	if fd >= 0 {
		os.NewFile(uintptr(fd), "").Close()
	}
}
