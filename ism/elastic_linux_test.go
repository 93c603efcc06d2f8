package ism_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/ism"
)

// TestRecommitPunchesOnlyWhatWasWritten: a reused elastic DMB gives back the memory a
// writer committed beyond its first chunk, and skips the punch when there is none; it
// looks only when the writer flagged a commit (committed), and a DMB that was not elastic
// (allocated whole, which SEEK_DATA does not see) is always punched. The first chunk is
// never touched.
func TestRecommitPunchesOnlyWhatWasWritten(t *testing.T) {
	const size = 1 << 20
	owner := openDevice(t, ism.Config{})
	peer := openDevice(t, ism.Config{})
	m, err := owner.RegisterElasticDMB(size, peer.GID(), 0)
	require.NoError(t, err)
	t.Cleanup(func() { owner.UnregisterDMB(m) })
	r := attach(t, peer, owner, m)
	first := m.Bytes()[100:200]
	fill(first, 3)
	want := append([]byte(nil), first...)
	counts := func(looks, punches int, msg string) {
		t.Helper()
		assert.Equal(t, looks, ism.Looks(m), "looks: %s", msg)
		assert.Equal(t, punches, ism.Punches(m), "punches: %s", msg)
	}

	// Nothing beyond the first chunk, and no flag: no look, no punch, and the first
	// chunk keeps its bytes. With the flag (a writer that committed and gave it all
	// back) it looks, and finds nothing to punch.
	require.NoError(t, m.Recommit(true, false))
	counts(0, 0, "a DMB written only in its first chunk")
	require.NoError(t, m.Recommit(true, true))
	counts(1, 0, "a flagged DMB with nothing beyond its first chunk")
	assert.Equal(t, want, m.Bytes()[100:200], "first chunk after Recommit")

	// The writer commits and writes a chunk further on, as a bulk transfer does.
	off := 5*ism.ElasticChunk + 4096
	require.NoError(t, r.Commit(5*ism.ElasticChunk, ism.ElasticChunk))
	fill(r.Bytes()[off:off+8192], 7)
	require.NoError(t, m.Recommit(true, true))
	counts(2, 1, "a writer committed a chunk")

	// Committed, written and given back by the writer (MADV_REMOVE): nothing to punch.
	require.NoError(t, r.Commit(9*ism.ElasticChunk, ism.ElasticChunk))
	r.Bytes()[9*ism.ElasticChunk] = 1
	require.NoError(t, r.Decommit(9*ism.ElasticChunk, ism.ElasticChunk))
	require.NoError(t, m.Recommit(true, true))
	counts(3, 1, "the writer gave its chunk back")

	// The punch took the writer's bytes, for both mappings. Reading the span faults pages
	// in (tmpfs allocates on a read fault), so it counts as written: the next reuse
	// punches again.
	assert.Equal(t, make([]byte, 8192), m.Bytes()[off:off+8192], "the owner's view after the punch")
	assert.Equal(t, make([]byte, 8192), r.Bytes()[off:off+8192], "the writer's view after the punch")
	require.NoError(t, m.Recommit(true, true))
	counts(4, 2, "a reader faulted pages in")

	// A writer that commits without the flag keeps its memory across the reuse (the
	// owner trusts the flag's absence, docs/SECURITY.md); the next flagged reuse gives it
	// back.
	require.NoError(t, r.Commit(7*ism.ElasticChunk, ism.ElasticChunk))
	fill(r.Bytes()[7*ism.ElasticChunk:8*ism.ElasticChunk], 9)
	require.NoError(t, m.Recommit(true, false))
	counts(4, 2, "an unflagged commit")
	assert.Equal(t, byte(9), m.Bytes()[7*ism.ElasticChunk], "the unflagged writer's bytes stay")
	require.NoError(t, m.Recommit(true, true))
	counts(5, 3, "the flagged reuse after an unflagged commit")
	assert.Equal(t, byte(0), m.Bytes()[7*ism.ElasticChunk], "bytes after the flagged reuse")

	// Fixed (allocated whole, never written), then elastic again: punched, once, flag or
	// no flag.
	require.NoError(t, m.Recommit(false, false))
	assert.False(t, m.Elastic())
	require.NoError(t, m.Recommit(true, false))
	counts(5, 4, "a DMB that was allocated whole")
	require.NoError(t, m.Recommit(true, false))
	counts(5, 4, "the same DMB reused elastic again")
	assert.Equal(t, want, m.Bytes()[100:200], "first chunk at the end")
}
