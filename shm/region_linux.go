package shm

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"
)

// regionSeals are the seals NewRegion puts on every memfd: the size is fixed
// for good, and no one can add or remove seals afterwards.
const regionSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Region is a shared memory region backed by a memfd and mapped read-write,
// MAP_SHARED, in this process.
//
// A Region has no finalizer: dropping one without Close leaks its mapping
// (the memfd of a NewRegion region is closed by its os.File's finalizer). An
// automatic unmap would be worse, since slices from Bytes may outlive the
// Region value and would then point at unmapped memory.
type Region struct {
	size int
	fd   int      // memfd of a NewRegion region; -1 for a mapped one
	file *os.File // owns fd; nil for a mapped region

	mu  sync.Mutex
	mem mmap.MMap // nil after Close
}

// NewRegion creates a memfd called name (it shows in /proc/<pid>/maps as
// "/memfd:<name> (deleted)"), sizes it to size bytes, seals it against any
// change of size, and maps it. size must be positive and a multiple of the
// page size.
func NewRegion(name string, size int) (*Region, error) {
	if err := checkRegionSize(size); err != nil {
		return nil, err
	}
	return newRegion(name, size)
}

// NewRegionAnySize is NewRegion for a size that need not be a multiple of the
// page size, for a shared table with a layout of its own (internal/presence).
// The mapping covers whole pages but Bytes is exactly size bytes long, and the
// file ends there, so no access within Bytes can fault.
func NewRegionAnySize(name string, size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shm: region size %d is not positive", size)
	}
	return newRegion(name, size)
}

func newRegion(name string, size int) (*Region, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create %q: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), "/memfd:"+name)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: ftruncate memfd %q to %d bytes: %w", name, size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, regionSeals); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: sealing memfd %q: %w", name, err)
	}
	mem, err := mmap.MapRegion(f, size, mmap.RDWR, 0, 0)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: mmap memfd %q: %w", name, err)
	}
	return &Region{size: size, fd: fd, file: f, mem: mem}, nil
}

// MapRegion maps a region whose memfd was received from a peer. It takes
// ownership of fd and closes it whether it succeeds or not; on success the
// mapping keeps the memory alive. It refuses, with a [*RegionError], an fd
// that is not a sealable memfd, one not sealed with F_SEAL_SHRINK, and one
// whose size is not exactly size. size must be positive and a multiple of the
// page size.
func MapRegion(fd int, size int) (*Region, error) {
	return mapRegion(fd, size, checkRegionSize)
}

// MapRegionAnySize is MapRegion for a region made by [NewRegionAnySize]: size
// must be positive, not a multiple of the page size.
func MapRegionAnySize(fd int, size int) (*Region, error) {
	return mapRegion(fd, size, func(size int) error {
		if size <= 0 {
			return fmt.Errorf("shm: region size %d is not positive", size)
		}
		return nil
	})
}

func mapRegion(fd int, size int, checkSize func(int) error) (*Region, error) {
	if fd < 0 {
		return nil, fmt.Errorf("shm: MapRegion: invalid descriptor %d", fd)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	if err := checkSize(size); err != nil {
		return nil, err
	}
	// Seals first: once F_SEAL_SHRINK is seen it can never be removed, so the
	// size checked next cannot shrink between the check and the mmap.
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		// EINVAL: not a file system that supports seals (not a memfd).
		return nil, &RegionError{Fd: fd, Reason: ErrNotMemfd, Err: os.NewSyscallError("fcntl F_GET_SEALS", err)}
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, &RegionError{Fd: fd, Reason: ErrNotSealed, Got: int64(seals), Want: unix.F_SEAL_SHRINK}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &RegionError{Fd: fd, Reason: ErrNotMemfd, Err: os.NewSyscallError("fstat", err)}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &RegionError{Fd: fd, Reason: ErrNotMemfd, detail: fmt.Sprintf("file mode %#o is not a regular file", st.Mode)}
	}
	if st.Size != int64(size) {
		return nil, &RegionError{Fd: fd, Reason: ErrSizeMismatch, Got: st.Size, Want: int64(size)}
	}
	mem, err := mmap.MapRegion(f, size, mmap.RDWR, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap received memfd: %w", err)
	}
	return &Region{size: size, fd: -1, mem: mem}, nil
}

func checkRegionSize(size int) error {
	page := os.Getpagesize()
	if size <= 0 || size%page != 0 {
		return fmt.Errorf("shm: region size %d is not a positive multiple of the page size %d", size, page)
	}
	return nil
}

// Bytes returns the mapping, or nil after Close. It is page aligned, so
// 8-byte aligned. The slice must not be used after Close.
func (r *Region) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mem
}

// Fd returns the memfd of a region made by NewRegion, for sending to a peer
// with [SendFds]. It returns -1 for a region made by MapRegion and after Close.
func (r *Region) Fd() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return -1
	}
	return r.fd
}

// Size returns the size of the region in bytes.
func (r *Region) Size() int { return r.size }

// Close unmaps the region and closes its memfd, if it has one. Further
// calls do nothing and return nil. No other use of the region, or of slices
// obtained from Bytes, may overlap or follow Close.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	err := r.mem.Unmap()
	r.mem = nil
	if err != nil {
		err = fmt.Errorf("shm: munmap region: %w", err)
	}
	if r.file != nil {
		err = errors.Join(err, r.file.Close())
		r.file = nil
	}
	return err
}
