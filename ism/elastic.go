package ism

import (
	"errors"
	"fmt"
	"os"
)

// Elastic DMBs. A DMB's size is fixed when it is registered and sent in CLC, but its
// memory need not all be there: an elastic DMB commits (allocates) only its first
// ElasticChunk when it is registered, and the peer that writes into it commits further
// chunks through its mapping just before it writes there (RemoteDMB.Commit) and gives
// back the chunks it no longer needs (RemoteDMB.Decommit). The writer is the one that
// knows: a connection that moves only small messages never commits more than a chunk or
// two, one that streams gets the whole ring, and gives it back when it goes idle.
//
// Commit is madvise(MADV_POPULATE_WRITE), which allocates the pages or fails with an
// error (ENOMEM under a memory cgroup limit) instead of the SIGBUS or OOM kill that a
// plain store into a hole would risk; it is preceded by the same cgroup headroom check
// as a registration. Decommit is madvise(MADV_REMOVE), which punches the span out of the
// memfd: the pages go, for both mappings, and read as zeros if touched again.
const ElasticChunk = 64 << 10

// ErrCommit reports that a writer could not commit memory of a peer's elastic DMB; it
// wraps the cause (ErrNoMemory or the madvise error).
var ErrCommit = errors.New("ism: cannot commit DMB memory")

// Elastic reports whether only the DMB's first ElasticChunk is committed by the owner.
func (m *DMB) Elastic() bool {
	m.dev.mu.Lock()
	defer m.dev.mu.Unlock()
	return m.elastic
}

// Recommit prepares a DMB that is handed to a new connection: elastic, it gives back all
// memory beyond its first chunk (whatever the last writer committed), so that it starts
// small; not elastic, it commits all of it (it may have been elastic before). A memory
// shortage is ErrNoMemory (wrapped), as at registration.
//
// The punch that gives the memory back is skipped when there is none. An elastic DMB's
// memory beyond its first chunk is only ever committed by its writer, which says so
// first (committed: cdc.WakeCommitted in the wake word, read by the caller); without it
// Recommit does not look. With it, it looks (SEEK_DATA finds every page a writer
// committed or wrote) and punches only if something is there: a writer that went idle
// gave its memory back itself. A DMB that was not elastic was allocated whole by
// fallocate, which SEEK_DATA does not see, and is always punched. The punch is what a
// short-lived connection would otherwise pay for nothing: it zaps the span in every
// process that maps it, and with 16 handshakes at a time it sent TLB-flush IPIs to the
// other CPU (flush_tlb_mm_range, smp_call_function_many_cond in a profile); the look is
// an lseek under the file's lock (1.7% of all CPU with 256 short-lived connections at a
// time). A writer that commits memory without the flag keeps it in the DMB across reuse:
// its own peer's memory, bounded by the DMB's size.
func (m *DMB) Recommit(elastic, committed bool) error {
	d := m.dev
	if elastic {
		d.mu.Lock()
		defer d.mu.Unlock()
		if m.slab == nil || m.slab.memfd < 0 {
			return ErrClosed
		}
		if m.size > ElasticChunk {
			off, n := int64(m.slot)*int64(m.size)+ElasticChunk, int64(m.size-ElasticChunk)
			punch := !m.elastic
			if !punch && committed {
				m.looks++
				var err error
				if punch, err = written(m.slab.memfd, off, n); err != nil {
					punch = true // a kernel or file system that cannot tell: punch
				}
			}
			if punch {
				if err := punchHole(m.slab.memfd, off, n); err != nil {
					return fmt.Errorf("ism: DMB memory: %w", err)
				}
				m.punches++
			}
		}
		m.elastic = true
		return nil
	}
	d.mu.Lock()
	was := m.elastic
	d.mu.Unlock()
	if !was {
		return nil
	}
	done, err := memoryRoom(m.size)
	if err != nil {
		return err
	}
	defer done()
	d.mu.Lock()
	defer d.mu.Unlock()
	if m.slab == nil || m.slab.memfd < 0 {
		return ErrClosed
	}
	if err := allocate(m.slab.memfd, int64(m.slot)*int64(m.size), int64(m.size)); err != nil {
		return fmt.Errorf("ism: DMB memory: %w", err)
	}
	m.elastic = false
	return nil
}

// RegisterElasticDMB is RegisterDMBPool for an elastic DMB: only its first ElasticChunk
// is allocated now; the peer that writes into it commits the rest as it needs it.
func (d *Device) RegisterElasticDMB(size int, peer GID, pool uint64) (*DMB, error) {
	return d.registerDMB(size, peer, pool, true)
}

// Commit allocates the pages of [off, off+n) of the peer's DMB (offsets in the DMB, CDC
// area included; page-aligned outward), so that writing there cannot fault for want of
// memory. It fails with ErrCommit, wrapping ErrNoMemory when a memory cgroup limit leaves
// no room, and writes nothing.
func (r *RemoteDMB) Commit(off, n int) error {
	span, err := r.span(off, n)
	if err != nil || len(span) == 0 {
		return err
	}
	done, err := commitRoom(len(span))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCommit, err)
	}
	err = populate(span)
	done()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCommit, err)
	}
	return nil
}

// Decommit gives back the memory of [off, off+n) of the peer's DMB (offsets in the DMB,
// page-aligned inward): the pages are punched out of the memfd for every mapping. The
// caller guarantees that neither side reads or writes the span until it commits it again.
func (r *RemoteDMB) Decommit(off, n int) error {
	page := os.Getpagesize()
	lo, hi := (off+page-1)/page*page, (off+n)/page*page
	if lo >= hi {
		return nil
	}
	span, err := r.span(lo, hi-lo)
	if err != nil {
		return err
	}
	return removePages(span)
}

// span returns the mapped bytes of [off, off+n), widened to whole pages.
func (r *RemoteDMB) span(off, n int) ([]byte, error) {
	mem := r.mem
	if off < 0 || n < 0 || off > len(mem) || n > len(mem)-off {
		return nil, fmt.Errorf("ism: span offset %d size %d outside DMB of %d bytes", off, n, len(mem))
	}
	if n == 0 {
		return nil, nil
	}
	page := os.Getpagesize()
	lo, hi := off/page*page, min((off+n+page-1)/page*page, len(mem))
	return mem[lo:hi], nil
}
