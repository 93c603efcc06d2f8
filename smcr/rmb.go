package smcr

import (
	"fmt"

	"github.com/smcloop/smcloop/internal/verbs"
)

// RMB sizes: SMC-R's CLC carries an RMBE size as a 4-bit exponent of 16 KiB
// (smc_compress_bufsize, SMC_BUF_MIN_SIZE).
const (
	minRMBSize  = 16 << 10
	maxRMBShift = 15
)

func validRMBSize(n int) bool {
	for k := 0; k <= maxRMBShift; k++ {
		if n == minRMBSize<<k {
			return true
		}
	}
	return false
}

// RMBSize is the RMBE size SMC-R uses for a receive buffer of at least n bytes: the
// smallest 16 KiB << k that holds n, at most 16 KiB << 15.
func RMBSize(n int) int {
	for k := 0; k < maxRMBShift; k++ {
		if minRMBSize<<k >= n {
			return minRMBSize << k
		}
	}
	return minRMBSize << maxRMBShift
}

// CompressedSize is the CLC's rmbe_size nibble for an RMBE size (smc_compress_bufsize).
func CompressedSize(n int) uint8 {
	var k uint8
	for minRMBSize<<k < n && k < maxRMBShift {
		k++
	}
	return k
}

// RMB is a connection's receive buffer (the kernel's smc_buf_desc of an RMB): memory
// registered for remote write, which the peer fills with RDMA WRITEs. RMBs are pooled per
// link group and reused across connections (smc_buf_get_slot); a new one's rkey travels
// in the CLC of the group's first connection and in CONFIRM_RKEY for later ones, and is
// withdrawn with DELETE_RKEY when the RMB is freed.
type RMB struct {
	g    *LinkGroup
	mem  *verbs.Mem
	mr   verbs.MR
	buf  []byte
	size int
}

// RKey is the key the peer's RDMA WRITEs name the RMB with.
func (r *RMB) RKey() uint32 { return r.mr.RKey() }

// Addr is the RMB's address as the peer addresses it.
func (r *RMB) Addr() uint64 { return r.mr.Addr() }

// Size is the RMB's size in bytes, an RMBE size.
func (r *RMB) Size() int { return r.size }

func (r *RMB) destroy() {
	r.mr.Close()
	r.mem.Close()
}

// getRMB returns an idle RMB of size bytes for reuse, or registers a new one; a new RMB
// of a connection that is not the group's first is announced with CONFIRM_RKEY
// (smcr_lgr_reg_rmbs), which needs the link active. reused reports a pooled one.
func (g *LinkGroup) getRMB(size int, firstContact bool) (r *RMB, reused bool, err error) {
	g.mu.Lock()
	if g.down != nil {
		err := g.down
		g.mu.Unlock()
		return nil, false, err
	}
	for i, f := range g.free {
		if f.size == size {
			g.free = append(g.free[:i], g.free[i+1:]...)
			g.mu.Unlock()
			return f, true, nil
		}
	}
	g.memUsers++ // keeps the PD
	pd := g.pd
	g.mu.Unlock()
	r, err = g.newRMB(pd, size)
	if err != nil {
		g.memDone()
		return nil, false, err
	}
	if !firstContact {
		if err := g.confirmRKey(r); err != nil {
			r.destroy()
			g.memDone()
			return nil, false, err
		}
	}
	return r, false, nil
}

func (g *LinkGroup) newRMB(pd verbs.PD, size int) (*RMB, error) {
	mem, err := verbs.NewMem(size)
	if err != nil {
		return nil, fmt.Errorf("smcr: RMB: %w", err)
	}
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		mem.Close()
		return nil, fmt.Errorf("smcr: RMB: %w", err)
	}
	return &RMB{g: g, mem: mem, mr: mr, buf: mem.Bytes()[:size], size: size}, nil
}

// putRMB gives an RMB back: to the pool if reuse is true and the pool has room, otherwise
// it is withdrawn from the peer (DELETE_RKEY, while the link is up) and freed.
func (g *LinkGroup) putRMB(r *RMB, reuse bool) {
	g.mu.Lock()
	torn, down := g.torn, g.down != nil
	if !torn && reuse && len(g.free) < max(g.cfg.MaxFreeRMBs, 0) {
		clear(r.buf) // no bytes of one connection reach the next
		g.free = append(g.free, r)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	if !torn && !down {
		_ = g.deleteRKey(r) // freed either way; a peer that goes on writing breaks the link
	}
	r.destroy()
	g.memDone()
}

// FreeRMBs is the number of idle RMBs the group keeps for reuse.
func (g *LinkGroup) FreeRMBs() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.free)
}
