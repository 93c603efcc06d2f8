package shm_test

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop/shm"
)

var page = os.Getpagesize()

func newRegion(t testing.TB, name string, size int) *shm.Region {
	t.Helper()
	r, err := shm.NewRegion(name, size)
	if err != nil {
		t.Fatalf("NewRegion(%q, %d): %v", name, size, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func countMappings(t testing.TB, substr string) int {
	t.Helper()
	n, err := shm.CountMappings(substr)
	if err != nil {
		t.Fatalf("CountMappings: %v", err)
	}
	return n
}

func TestNewRegion(t *testing.T) {
	size := 4 * page
	r := newRegion(t, "shm-test-new", size)
	if r.Size() != size || len(r.Bytes()) != size {
		t.Fatalf("Size() = %d, len(Bytes()) = %d, want %d", r.Size(), len(r.Bytes()), size)
	}
	for i, b := range r.Bytes() {
		if b != 0 {
			t.Fatalf("new region byte %d = %#x, want 0", i, b)
		}
	}
	requireCloexec(t, r.Fd())
	if n := countMappings(t, "/memfd:shm-test-new (deleted)"); n != 1 {
		t.Errorf("%d mappings of the memfd, want 1", n)
	}

	seals, err := unix.FcntlInt(uintptr(r.Fd()), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatalf("F_GET_SEALS: %v", err)
	}
	want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if seals != want {
		t.Errorf("seals = %#x, want %#x", seals, want)
	}
	for _, sz := range []int64{int64(size) - int64(page), int64(size) + int64(page), 0} {
		if err := unix.Ftruncate(r.Fd(), sz); !errors.Is(err, unix.EPERM) {
			t.Errorf("ftruncate sealed memfd to %d: %v, want EPERM", sz, err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(r.Fd()), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); !errors.Is(err, unix.EPERM) {
		t.Errorf("adding a seal after F_SEAL_SEAL: %v, want EPERM", err)
	}
}

// TestRegionAnySize maps a region of a size that is not whole pages on both
// sides: Bytes is exactly size long, writes reach the other side up to the
// last byte, and a received region of another size is refused.
func TestRegionAnySize(t *testing.T) {
	size := page + 64
	r, err := shm.NewRegionAnySize("shm-test-any", size)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	require.Len(t, r.Bytes(), size)
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(r.Fd(), &st))
	assert.Equal(t, int64(size), st.Size)

	m, err := shm.MapRegionAnySize(dupFd(t, r.Fd()), size)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.Len(t, m.Bytes(), size)
	m.Bytes()[size-1] = 0xa5
	assert.Equal(t, byte(0xa5), r.Bytes()[size-1])

	_, err = shm.MapRegionAnySize(dupFd(t, r.Fd()), size+8)
	assert.ErrorIs(t, err, shm.ErrSizeMismatch)
	_, err = shm.MapRegion(dupFd(t, r.Fd()), size)
	assert.Error(t, err, "MapRegion keeps to whole pages")
	for _, bad := range []int{0, -1} {
		_, err := shm.NewRegionAnySize("shm-test-any-bad", bad)
		assert.Error(t, err, "size %d", bad)
	}
}

func TestNewRegionBadSize(t *testing.T) {
	for _, size := range []int{0, -page, 1, page / 2, page + 1, 3*page - 8} {
		if r, err := shm.NewRegion("shm-test-bad", size); err == nil {
			r.Close()
			t.Errorf("NewRegion(size %d) succeeded, want error", size)
		}
	}
}

// TestRegionSharedThroughFd maps a region through a second descriptor, as a
// peer that received the memfd would, and checks both mappings see the same
// memory, also after the creator has closed its side.
func TestRegionSharedThroughFd(t *testing.T) {
	const name = "shm-test-shared"
	size := 2 * page
	r := newRegion(t, name, size)
	dup := dupFd(t, r.Fd())
	m, err := shm.MapRegion(dup, size)
	if err != nil {
		t.Fatalf("MapRegion: %v", err)
	}
	defer m.Close()
	if fdOpen(dup) {
		t.Errorf("MapRegion left fd %d open", dup)
	}
	if m.Fd() != -1 || m.Size() != size || len(m.Bytes()) != size {
		t.Errorf("mapped region: Fd() = %d, Size() = %d, len(Bytes()) = %d; want -1, %d, %d",
			m.Fd(), m.Size(), len(m.Bytes()), size, size)
	}
	if n := countMappings(t, "/memfd:"+name+" "); n != 2 {
		t.Errorf("%d mappings of the memfd, want 2", n)
	}

	a, b := r.Bytes(), m.Bytes()
	for i := range a {
		a[i] = byte(i*31 + 7)
	}
	for i := range b {
		if b[i] != byte(i*31+7) {
			t.Fatalf("mapped byte %d = %#x, want %#x", i, b[i], byte(i*31+7))
		}
	}
	b[size-1] = 0x5a
	if a[size-1] != 0x5a {
		t.Fatalf("write through the mapped region not seen by the creator")
	}

	// The mapping alone keeps the memory alive.
	if err := r.Close(); err != nil {
		t.Fatalf("Close creator: %v", err)
	}
	b[0] = 0xa5
	if b[0] != 0xa5 || b[1] != byte(1*31+7) {
		t.Fatalf("mapped region lost its contents after the creator closed")
	}
	if n := countMappings(t, "/memfd:"+name+" "); n != 1 {
		t.Errorf("%d mappings after closing the creator, want 1", n)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close mapped: %v", err)
	}
	if n := countMappings(t, "/memfd:"+name+" "); n != 0 {
		t.Errorf("%d mappings after closing both, want 0", n)
	}
}

func TestMapRegionRefuses(t *testing.T) {
	size := 2 * page
	memfd := func(t *testing.T, flags, seals int) int {
		fd, err := unix.MemfdCreate("shm-test-raw", flags)
		if err != nil {
			t.Fatalf("memfd_create: %v", err)
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			unix.Close(fd)
			t.Fatalf("ftruncate: %v", err)
		}
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				unix.Close(fd)
				t.Fatalf("F_ADD_SEALS: %v", err)
			}
		}
		return fd
	}
	tests := []struct {
		name   string
		fd     func(t *testing.T) int
		size   int
		reason error
	}{
		{
			name:   "wrong size",
			fd:     func(t *testing.T) int { return dupFd(t, newRegion(t, "shm-test-size", size).Fd()) },
			size:   2 * size,
			reason: shm.ErrSizeMismatch,
		},
		{
			name:   "smaller size",
			fd:     func(t *testing.T) int { return dupFd(t, newRegion(t, "shm-test-size", size).Fd()) },
			size:   size - page,
			reason: shm.ErrSizeMismatch,
		},
		{
			name:   "sealable but unsealed",
			fd:     func(t *testing.T) int { return memfd(t, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING, 0) },
			size:   size,
			reason: shm.ErrNotSealed,
		},
		{
			name:   "not sealable", // the kernel sets only F_SEAL_SEAL
			fd:     func(t *testing.T) int { return memfd(t, unix.MFD_CLOEXEC, 0) },
			size:   size,
			reason: shm.ErrNotSealed,
		},
		{
			name: "sealed against growing only",
			fd: func(t *testing.T) int {
				return memfd(t, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING, unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
			},
			size:   size,
			reason: shm.ErrNotSealed,
		},
		{
			name: "pipe",
			fd: func(t *testing.T) int {
				var p [2]int
				if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
					t.Fatalf("pipe: %v", err)
				}
				unix.Close(p[1])
				return p[0]
			},
			size:   size,
			reason: shm.ErrNotMemfd,
		},
		{
			name: "eventfd",
			fd: func(t *testing.T) int {
				fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
				if err != nil {
					t.Fatalf("eventfd: %v", err)
				}
				return fd
			},
			size:   size,
			reason: shm.ErrNotMemfd,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd := tt.fd(t)
			m, err := shm.MapRegion(fd, tt.size)
			if err == nil {
				m.Close()
				t.Fatalf("MapRegion succeeded, want %v", tt.reason)
			}
			if !errors.Is(err, tt.reason) {
				t.Errorf("MapRegion: %v, want %v", err, tt.reason)
			}
			var re *shm.RegionError
			if !errors.As(err, &re) || re.Fd != fd {
				t.Errorf("MapRegion error %#v is not a *RegionError for fd %d", err, fd)
			}
			if fdOpen(fd) {
				unix.Close(fd)
				t.Errorf("refused fd %d left open", fd)
			}
			t.Log(err)
		})
	}

	t.Run("size mismatch fields", func(t *testing.T) {
		_, err := shm.MapRegion(dupFd(t, newRegion(t, "shm-test-size", size).Fd()), 4*size)
		var re *shm.RegionError
		if !errors.As(err, &re) || re.Got != int64(size) || re.Want != int64(4*size) {
			t.Errorf("MapRegion: %#v, want RegionError Got %d Want %d", err, size, 4*size)
		}
	})
	t.Run("bad size closes fd", func(t *testing.T) {
		fd := dupFd(t, newRegion(t, "shm-test-size", size).Fd())
		if _, err := shm.MapRegion(fd, size+1); err == nil {
			t.Fatalf("MapRegion(size %d) succeeded", size+1)
		}
		if fdOpen(fd) {
			unix.Close(fd)
			t.Errorf("fd %d left open", fd)
		}
	})
	t.Run("negative fd", func(t *testing.T) {
		if _, err := shm.MapRegion(-1, size); err == nil {
			t.Fatal("MapRegion(-1) succeeded")
		}
	})
}

func TestRegionCloseIdempotent(t *testing.T) {
	r := newRegion(t, "shm-test-close", page)
	m, err := shm.MapRegion(dupFd(t, r.Fd()), page)
	if err != nil {
		t.Fatalf("MapRegion: %v", err)
	}
	fd := r.Fd()
	for _, reg := range []*shm.Region{r, m} {
		for i := range 3 {
			if err := reg.Close(); err != nil {
				t.Errorf("Close #%d: %v", i+1, err)
			}
		}
		if reg.Bytes() != nil || reg.Fd() != -1 {
			t.Errorf("after Close: Bytes() = %d bytes, Fd() = %d; want nil, -1", len(reg.Bytes()), reg.Fd())
		}
	}
	if fdOpen(fd) {
		t.Errorf("memfd %d still open after Close", fd)
	}
}
