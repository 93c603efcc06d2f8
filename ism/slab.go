package ism

import (
	"fmt"
)

// DMB memory comes from slabs, as an ISM device's DMBs come from its one memory: a slab
// is a sealed memfd holding slabSlots DMBs of one size, all issued to one peer device
// (a peer that maps the slab can reach only its own DMBs). The owner maps each DMB on its
// own; the attacher gets the slab's memfd with each attach, maps the DMB's span and
// closes the descriptor at once. So a DMB costs no descriptor on either side: the owner
// keeps one per slab, the attacher none. A DMB given back leaves its pages in the memfd:
// its slot is marked dirty, and zeroed when it is handed out again, so a later DMB in the
// slot starts zeroed. The memory stays until the slab has no DMB left and is closed, and
// goes when the last mapping of it goes.
const slabSlots = 64

// slab is one memfd of slabSlots DMBs of size bytes for one peer device and pool.
type slab struct {
	key     slabKey
	memfd   int
	used    [slabSlots]bool
	dirty   [slabSlots]bool // held a DMB before: zeroed when handed out again
	n       int             // DMBs in use
	pins    int             // attach replies sending memfd: it stays open until they are sent
	retired bool            // its pool is retired: no slot is handed out again
}

// slabKey groups DMBs that may share a slab: same peer device, same size, same pool. A
// pool is what a link group registers its DMBs in (RegisterDMBPool); once the group is
// terminated its pool is retired, so a slot that its peer may still write into is
// never handed to a new connection, even with the same peer.
type slabKey struct {
	peer GID
	size int
	pool uint64
}

// slabForLocked returns a slab with a free slot for (peer, size) and the slot, creating a slab
// if every one is full. d.mu is held.
func (d *Device) slabForLocked(peer GID, size int, pool uint64) (*slab, int, error) {
	key := slabKey{peer, size, pool}
	for _, s := range d.slabs[key] {
		if s.n < slabSlots {
			for i, u := range s.used {
				if !u {
					return s, i, nil
				}
			}
		}
	}
	fd, err := newSealedMemfd("smcloop-dmb", int64(size)*slabSlots)
	if err != nil {
		return nil, 0, fmt.Errorf("ism: DMB memory: %w", err)
	}
	s := &slab{key: key, memfd: fd}
	d.slabs[key] = append(d.slabs[key], s)
	return s, 0, nil
}

// freeSlotLocked gives slot i of s back. A slab left empty is closed: its memory goes
// when the last mapping of it, ours or a peer's, goes. d.mu is held.
func (d *Device) freeSlotLocked(s *slab, i int) {
	if !s.used[i] {
		return
	}
	s.used[i] = false
	s.dirty[i] = true
	s.n--
	if s.n > 0 {
		return
	}
	if !s.retired {
		d.dropSlabLocked(s)
		s.retired = true // nothing hands out its slots any more
	}
	d.closeSlabLocked(s)
}

// closeSlabLocked closes the memfd of a slab with no DMB left, unless an attach reply is
// sending it. d.mu is held.
func (d *Device) closeSlabLocked(s *slab) {
	if s.n == 0 && s.pins == 0 && s.memfd >= 0 {
		closeFd(s.memfd)
		s.memfd = -1
	}
}

// dropSlabLocked takes s out of the slabs that hand out slots. d.mu is held.
func (d *Device) dropSlabLocked(s *slab) {
	list := d.slabs[s.key]
	for j, x := range list {
		if x == s {
			list[j] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(d.slabs, s.key)
	} else {
		d.slabs[s.key] = list
	}
}

// RetirePool stops handing out the slots of pool's slabs for peer: a terminated link
// group's peer may still write into DMBs it has mapped. The slabs close when their last
// DMB is unregistered.
func (d *Device) RetirePool(peer GID, pool uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, list := range d.slabs {
		if key.peer != peer || key.pool != pool {
			continue
		}
		for _, s := range list {
			s.retired = true
		}
		delete(d.slabs, key)
	}
}
