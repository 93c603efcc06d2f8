package ism

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemcgLimits reads fake cgroup trees of both versions: every level from the
// process's cgroup up to the root that has a limit is found, with its usage file; levels
// without a limit ("max", or v1's near-2^63) are left out.
func TestMemcgLimits(t *testing.T) {
	write := func(path, s string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
	}
	t.Run("v1", func(t *testing.T) {
		root := t.TempDir()
		proc := []byte("9:name=systemd:/\n4:memory:/a/b\n1:cpu,cpuacct:/\n0::/\n")
		mem := filepath.Join(root, "memory")
		write(filepath.Join(mem, "memory.limit_in_bytes"), "9223372036854771712\n")
		write(filepath.Join(mem, "a", "memory.limit_in_bytes"), "1073741824\n")
		write(filepath.Join(mem, "a", "b", "memory.limit_in_bytes"), "67108864\n")
		got := memcgLimits(proc, root)
		assert.Equal(t, []memcgLevel{
			{usage: filepath.Join(mem, "a", "b", "memory.usage_in_bytes"), limit: 64 << 20},
			{usage: filepath.Join(mem, "a", "memory.usage_in_bytes"), limit: 1 << 30},
		}, got)
	})
	t.Run("v2", func(t *testing.T) {
		root := t.TempDir()
		proc := []byte("0::/svc/job\n")
		write(filepath.Join(root, "svc", "memory.max"), "max\n")
		write(filepath.Join(root, "svc", "job", "memory.max"), "33554432\n")
		got := memcgLimits(proc, root)
		assert.Equal(t, []memcgLevel{{usage: filepath.Join(root, "svc", "job", "memory.current"), limit: 32 << 20}}, got)
	})
	t.Run("none", func(t *testing.T) {
		root := t.TempDir()
		got := memcgLimits(nil, root) // /proc/self/cgroup could not be read
		assert.NotNil(t, got)
		assert.Empty(t, got)
	})
}

// TestMemcgDataReserve: new DMBs must leave the whole margin under a limit, a writer's
// commit on the data path only half of it, so that a process near its limit declines new
// connections (MEM at the handshake) before the connections it has run short of memory.
func TestMemcgDataReserve(t *testing.T) {
	root := t.TempDir()
	self := filepath.Join(root, "self-cgroup")
	require.NoError(t, os.WriteFile(self, []byte("0::/job\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "job"), 0o755))
	const limit = 64 << 20 // margin 8 MiB (more than limit/16), data margin 4 MiB
	require.NoError(t, os.WriteFile(filepath.Join(root, "job", "memory.max"), []byte("67108864\n"), 0o644))
	setUsage := func(used int64) {
		t.Helper()
		require.NoError(t, os.WriteFile(filepath.Join(root, "job", "memory.current"), []byte(strconv.FormatInt(used, 10)), 0o644))
	}
	oldSelf, oldRoot := procSelfCgroup, cgroupRoot
	procSelfCgroup, cgroupRoot = self, root
	reset := func() {
		memcg.mu.Lock()
		memcg.levels, memcg.self, memcg.room, memcg.roomAt = nil, nil, 0, time.Time{}
		memcg.mu.Unlock()
	}
	t.Cleanup(func() { procSelfCgroup, cgroupRoot = oldSelf, oldRoot; reset() })
	reset()

	setUsage(limit - 6<<20) // 6 MiB left: less than the margin, more than the data margin
	_, err := memoryRoom(ElasticChunk)
	require.ErrorIs(t, err, ErrNoMemory, "a new DMB must leave 8 MiB")
	done, err := commitRoom(ElasticChunk)
	require.NoError(t, err, "a commit must leave 4 MiB")
	done()

	// The commit's full check left 2 MiB - 64 KiB of room: commits within it are answered
	// without reading the usage, and one beyond it makes a full check, which refuses.
	setUsage(limit - 1<<20)
	done, err = commitRoom(1 << 20)
	require.NoError(t, err, "within the room the last check found")
	done()
	_, err = commitRoom(2 << 20)
	require.ErrorIs(t, err, ErrNoMemory)
}
