package ism

import (
	"os"
	"path/filepath"
	"testing"

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
