//go:build !linux

package shm

import (
	"net"
	"os"
	"time"
)

// Region is a shared memory region backed by a memfd. It exists only on Linux.
type Region struct{}

// NewRegion returns ErrUnsupported.
func NewRegion(name string, size int) (*Region, error) { return nil, ErrUnsupported }

// NewRegionAnySize returns ErrUnsupported.
func NewRegionAnySize(name string, size int) (*Region, error) { return nil, ErrUnsupported }

// MapRegion closes fd and returns ErrUnsupported.
func MapRegion(fd int, size int) (*Region, error) {
	closeFd(fd)
	return nil, ErrUnsupported
}

// MapRegionAnySize closes fd and returns ErrUnsupported.
func MapRegionAnySize(fd int, size int) (*Region, error) {
	closeFd(fd)
	return nil, ErrUnsupported
}

// Bytes returns nil.
func (r *Region) Bytes() []byte { return nil }

// Fd returns -1.
func (r *Region) Fd() int { return -1 }

// Size returns 0.
func (r *Region) Size() int { return 0 }

// Close returns nil.
func (r *Region) Close() error { return nil }

// Doorbell is a wake-up between processes. It exists only on Linux.
type Doorbell struct{}

// NewDoorbell returns ErrUnsupported.
func NewDoorbell() (*Doorbell, error) { return nil, ErrUnsupported }

// DoorbellFromFd closes fd and returns ErrUnsupported.
func DoorbellFromFd(fd int) (*Doorbell, error) {
	closeFd(fd)
	return nil, ErrUnsupported
}

// Ring returns ErrUnsupported.
func (d *Doorbell) Ring() error { return ErrUnsupported }

// Wait returns ErrUnsupported.
func (d *Doorbell) Wait() error { return ErrUnsupported }

// TryConsume returns false.
func (d *Doorbell) TryConsume() bool { return false }

// SetDeadline returns ErrUnsupported.
func (d *Doorbell) SetDeadline(t time.Time) error { return ErrUnsupported }

// Fd returns -1.
func (d *Doorbell) Fd() int { return -1 }

// Close returns nil.
func (d *Doorbell) Close() error { return nil }

// SendFds returns ErrUnsupported.
func SendFds(c *net.UnixConn, msg []byte, fds ...int) error { return ErrUnsupported }

// RecvFds returns ErrUnsupported.
func RecvFds(c *net.UnixConn, buf []byte, maxFds int) (n int, fds []int, err error) {
	return 0, nil, ErrUnsupported
}

// Msg is one message as ReadFds received it.
type Msg struct {
	N      int
	Fds    []int
	Trunc  bool
	CTrunc bool
}

// ReadFds returns ErrUnsupported.
func ReadFds(c *net.UnixConn, buf []byte, maxFds int) (Msg, error) { return Msg{}, ErrUnsupported }

// PeerCred returns ErrUnsupported.
func PeerCred(c *net.UnixConn) (*Cred, error) { return nil, ErrUnsupported }

// OpenFDs returns ErrUnsupported.
func OpenFDs() (int, error) { return 0, ErrUnsupported }

// CountMappings returns ErrUnsupported.
func CountMappings(substr string) (int, error) { return 0, ErrUnsupported }

// closeFd closes a descriptor handed to a constructor that cannot use it.
func closeFd(fd int) {
	if fd >= 0 {
		os.NewFile(uintptr(fd), "").Close()
	}
}
