package shm_test

import (
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
	require.NoError(t, err, "NewRegion(%q, %d)", name, size)
	t.Cleanup(func() { r.Close() })
	return r
}

func countMappings(t testing.TB, substr string) int {
	t.Helper()
	n, err := shm.CountMappings(substr)
	require.NoError(t, err, "CountMappings")
	return n
}

func TestNewRegion(t *testing.T) {
	size := 4 * page
	r := newRegion(t, "shm-test-new", size)
	require.Equal(t, size, r.Size(), "Size()")
	require.Len(t, r.Bytes(), size)
	require.Equal(t, make([]byte, size), r.Bytes(), "a new region is zeroed")
	requireCloexec(t, r.Fd())
	assert.Equal(t, 1, countMappings(t, "/memfd:shm-test-new (deleted)"), "mappings of the memfd")

	seals, err := unix.FcntlInt(uintptr(r.Fd()), unix.F_GET_SEALS, 0)
	require.NoError(t, err, "F_GET_SEALS")
	want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	assert.Equal(t, want, seals, "seals")
	for _, sz := range []int64{int64(size) - int64(page), int64(size) + int64(page), 0} {
		assert.ErrorIs(t, unix.Ftruncate(r.Fd(), sz), unix.EPERM, "ftruncate sealed memfd to %d", sz)
	}
	assert.ErrorIs(t, errOf(unix.FcntlInt(uintptr(r.Fd()), unix.F_ADD_SEALS, unix.F_SEAL_WRITE)), unix.EPERM, "adding a seal after F_SEAL_SEAL")
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
		r, err := shm.NewRegion("shm-test-bad", size)
		if err == nil {
			r.Close()
		}
		assert.Error(t, err, "NewRegion(size %d)", size)
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
	require.NoError(t, err, "MapRegion")
	defer m.Close()
	assert.False(t, fdOpen(dup), "MapRegion left fd %d open", dup)
	assert.Equal(t, -1, m.Fd(), "a mapped region's Fd()")
	assert.Equal(t, size, m.Size(), "Size()")
	assert.Len(t, m.Bytes(), size)
	assert.Equal(t, 2, countMappings(t, "/memfd:"+name+" "), "mappings of the memfd")

	a, b := r.Bytes(), m.Bytes()
	for i := range a {
		a[i] = byte(i*31 + 7)
	}
	require.Equal(t, a, b, "the mapped region's bytes")
	b[size-1] = 0x5a
	require.Equal(t, byte(0x5a), a[size-1], "write through the mapped region seen by the creator")

	// The mapping alone keeps the memory alive.
	require.NoError(t, r.Close(), "Close creator")
	b[0] = 0xa5
	require.Equal(t, []byte{0xa5, 1*31 + 7}, b[:2], "the mapped region's contents after the creator closed")
	assert.Equal(t, 1, countMappings(t, "/memfd:"+name+" "), "mappings after closing the creator")
	require.NoError(t, m.Close(), "Close mapped")
	assert.Zero(t, countMappings(t, "/memfd:"+name+" "), "mappings after closing both")
}

func TestMapRegionRefuses(t *testing.T) {
	size := 2 * page
	memfd := func(t *testing.T, flags, seals int) int {
		fd, err := unix.MemfdCreate("shm-test-raw", flags)
		require.NoError(t, err, "memfd_create")
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			unix.Close(fd)
			require.NoError(t, err, "ftruncate")
		}
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				unix.Close(fd)
				require.NoError(t, err, "F_ADD_SEALS")
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
				require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC), "pipe")
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
				require.NoError(t, err, "eventfd")
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
			}
			require.ErrorIs(t, err, tt.reason, "MapRegion")
			var re *shm.RegionError
			if assert.ErrorAs(t, err, &re) {
				assert.Equal(t, fd, re.Fd, "RegionError.Fd")
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
		require.ErrorAs(t, err, &re)
		assert.Equal(t, int64(size), re.Got, "RegionError.Got")
		assert.Equal(t, int64(4*size), re.Want, "RegionError.Want")
	})
	t.Run("bad size closes fd", func(t *testing.T) {
		fd := dupFd(t, newRegion(t, "shm-test-size", size).Fd())
		require.Error(t, errOf(shm.MapRegion(fd, size+1)), "MapRegion(size %d)", size+1)
		if fdOpen(fd) {
			unix.Close(fd)
			t.Errorf("fd %d left open", fd)
		}
	})
	t.Run("negative fd", func(t *testing.T) {
		require.Error(t, errOf(shm.MapRegion(-1, size)), "MapRegion(-1)")
	})
}

func TestRegionCloseIdempotent(t *testing.T) {
	r := newRegion(t, "shm-test-close", page)
	m, err := shm.MapRegion(dupFd(t, r.Fd()), page)
	require.NoError(t, err, "MapRegion")
	fd := r.Fd()
	for _, reg := range []*shm.Region{r, m} {
		for i := range 3 {
			assert.NoError(t, reg.Close(), "Close #%d", i+1)
		}
		assert.Nil(t, reg.Bytes(), "Bytes() after Close")
		assert.Equal(t, -1, reg.Fd(), "Fd() after Close")
	}
	assert.False(t, fdOpen(fd), "memfd %d still open after Close", fd)
}
