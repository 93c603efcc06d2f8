package ism

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Signalling between two devices, as an ISM device does it: one interrupt and one signal
// area for all DMBs, not a descriptor per buffer.
//
// When a peer device first attaches one of our DMBs over its connection to us, we create
// a signal channel for that connection: a shared bitmap (a sealed memfd, two bits per
// DMB index: data and space) and an AF_UNIX SOCK_STREAM socket pair, the "interrupt". The
// peer gets the bitmap and one end of the pair with that attach; we keep the other end
// and read it on a dispatcher goroutine (one per peer device, parked on Go's poller). To
// signal a DMB, the peer sets the DMB's bit in the bitmap, then its word's bit in the
// summary, then sends one byte on the socket with MSG_DONTWAIT. The dispatcher drains
// the socket, then takes (swaps to zero) the summary words and the words they name, and
// rings the local bells of the DMBs whose bits were set. A full socket queue (EAGAIN)
// loses nothing: the bits stay set, and the queued bytes wake the dispatcher for
// them. The channel lives as long as the peer's connection to us.
//
// Nothing here can block on the peer. Our end of the pair is an open file description
// the peer never gets, so it cannot make our reads blocking; the sender passes
// MSG_DONTWAIT on every send, which does not depend on the descriptor's flags. A hostile
// peer can set any bit of the bitmap: the dispatcher rings only DMBs issued to that peer
// (RegisterDMBFor), and a bell rung for nothing only makes a sleeper look again. It can
// flood the socket: that costs the dispatcher's CPU, not a wait, and the dispatcher
// takes a bounded batch before it looks at the bitmap.
//
// Layout of the bitmap: words [0, sigSummaryWords) are the summary (bit i: word
// sigSummaryWords+i may have bits set); the DMB bits follow, bit 2*index for data and
// 2*index+1 for space.
const (
	sigSummaryWords = 64 // covers 4096 words: 262144 bits, 131072 DMB indexes
	sigKindData     = 0
	sigKindSpace    = 1

	// MaxDMBsLimit is the largest DMB limit a device takes: the indexes one signal
	// bitmap covers.
	MaxDMBsLimit = sigSummaryWords * 64 * 64 / 2

	// flagNeedSignal in an attach request asks for the signal channel with the reply.
	flagNeedSignal = 1

	// sigDrainBatch bounds the reads (of up to 64 interrupt bytes) one round takes before it scans.
	sigDrainBatch = 64
)

// sigBitmapSize is the size of the bitmap for a device of maxDMBs DMBs.
func sigBitmapSize(maxDMBs int) int {
	words := sigSummaryWords + (2*maxDMBs+63)/64
	page := os.Getpagesize()
	return (words*8 + page - 1) / page * page
}

// sigMaxIndex is the number of DMB indexes a bitmap of size bytes covers.
func sigMaxIndex(size int) int {
	words := min(size/8-sigSummaryWords, sigSummaryWords*64)
	if words < 0 {
		return 0
	}
	return words * 64 / 2
}

func words(mem []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
}

// sigRecv is the receiving side of one peer device's signals to our DMBs.
type sigRecv struct {
	d      *Device
	peer   GID
	file   *os.File // our end of the socket pair, on the poller
	rc     syscall.RawConn
	remote int    // the peer's end, handed to it
	memfd  int    // the bitmap
	mem    []byte // the bitmap, mapped
	w      []uint64
	scanMu sync.Mutex // one scan at a time: a polling TryConsume sees a taken bit rung
	done   chan struct{}
	once   sync.Once
}

// newSigRecv creates the signal channel for the verified peer device and starts its
// dispatcher.
func (d *Device) newSigRecv(peer GID) (s *sigRecv, err error) {
	size := sigBitmapSize(d.maxDMBs)
	fds, err := streamPair()
	if err != nil {
		return nil, err
	}
	s = &sigRecv{d: d, peer: peer, remote: fds[1], memfd: -1, done: make(chan struct{})}
	s.file = os.NewFile(uintptr(fds[0]), "smcloop-ism-signal")
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	if s.rc, err = s.file.SyscallConn(); err != nil {
		return nil, err
	}
	if s.memfd, err = newSealedMemfd("smcloop-ism-signal", int64(size)); err != nil {
		return nil, err
	}
	if s.mem, err = mapShared(s.memfd, 0, size); err != nil {
		s.mem = nil
		return nil, err
	}
	s.w = words(s.mem)
	go s.dispatch()
	return s, nil
}

// release frees what newSigRecv made; the dispatcher has ended or never started.
func (s *sigRecv) release() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
	if s.remote >= 0 {
		closeFd(s.remote)
		s.remote = -1
	}
	if s.memfd >= 0 {
		closeFd(s.memfd)
		s.memfd = -1
	}
	if s.mem != nil {
		s.scanMu.Lock()
		munmap(s.mem)
		s.mem, s.w = nil, nil
		s.scanMu.Unlock()
	}
}

// close stops the dispatcher and frees the channel.
func (s *sigRecv) close() {
	s.once.Do(func() {
		s.file.Close() // ends the dispatcher's wait
		<-s.done
		s.release()
	})
}

// dispatch drains interrupts and rings the bells of the DMBs they signal, until close
// (or the peer's end closes: EOF).
//
// One poller wait serves the channel's whole life, and a wake-up costs one read: the
// interrupt is a stream socket, so a read shorter than the buffer has taken everything
// queued, and the scan runs inside the read callback, which then asks to wait. The
// poller is edge-triggered, and its readiness is reset only when a new Read call begins,
// never between the callback's return and the wait that follows: a byte that arrives
// after the short read makes that wait return at once. (Returning to call Read again
// would reset readiness and need a read to EAGAIN on every wake-up.) A peer that floods
// the socket costs reads and scans, bounded per round, never a missed wake-up: a full
// batch reads on instead of waiting.
func (s *sigRecv) dispatch() {
	defer close(s.done)
	var buf [64]byte
	// Built once: a closure per round would allocate on every wake-up.
	f := func(fd uintptr) bool {
		for {
			drained := false
			got := false
			for range sigDrainBatch {
				n, err := readFd(fd, buf[:])
				if err == syscall.EINTR {
					continue
				}
				if err == syscall.EAGAIN {
					drained = true
					break
				}
				if err != nil || n == 0 {
					return true // EOF (the peer's end closed) or a broken socket
				}
				got = true
				if n < len(buf) {
					drained = true
					break
				}
			}
			if got {
				s.scan()
			}
			if drained {
				return false // wait for the next interrupt
			}
		}
	}
	s.rc.Read(f) // returns at close or EOF
}

// scan takes every set bit and rings the bells of the DMBs they name.
func (s *sigRecv) scan() {
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	w := s.w
	if w == nil {
		return
	}
	for i := range sigSummaryWords {
		if atomic.LoadUint64(&w[i]) == 0 {
			continue
		}
		sum := atomic.SwapUint64(&w[i], 0)
		for sum != 0 {
			b := bits.TrailingZeros64(sum)
			sum &^= 1 << b
			wi := sigSummaryWords + i*64 + b
			if wi >= len(w) {
				continue // a bit the peer set past the bitmap's end
			}
			set := atomic.SwapUint64(&w[wi], 0)
			for set != 0 {
				k := bits.TrailingZeros64(set)
				set &^= 1 << k
				bit := (wi-sigSummaryWords)*64 + k
				s.d.signalled(s.peer, bit/2, bit%2)
			}
		}
	}
}

// signalled rings the bell of DMB index for a signal from peer, if that DMB may be
// attached by peer.
func (d *Device) signalled(peer GID, index, kind int) {
	if index < 0 || index >= len(d.byIndex) {
		return
	}
	m := d.byIndex[index].Load()
	if m == nil || !m.mayAttach(peer) {
		return
	}
	if kind == sigKindData {
		m.Data.Ring()
	} else {
		m.Space.Ring()
	}
}

// pollSignals scans every signal channel now, without waiting for the dispatchers
// (TryConsume's poll).
func (d *Device) pollSignals() {
	d.mu.Lock()
	sigs := make([]*sigRecv, 0, len(d.sigs))
	for s := range d.sigs {
		sigs = append(sigs, s)
	}
	d.mu.Unlock()
	for _, s := range sigs {
		s.scan()
	}
}

// sigSend is the sending side of our signals to one peer device's DMBs: our end of its
// socket pair and its bitmap, mapped. Every DMB of that device we attach over one
// connection shares it; it is freed when the connection is gone and the last of them
// detaches.
type sigSend struct {
	fd   int
	mem  []byte
	w    []uint64
	max  int          // DMB indexes the bitmap covers
	refs atomic.Int64 // attached DMBs, plus one while the connection keeps it
}

var errSigMalformed = errors.New("ism: malformed signal channel from peer device")

// newSigSend takes ownership of the two descriptors a peer device handed us: its socket
// end and its bitmap. Both are checked (a peer may send anything); on error both are
// closed.
func newSigSend(sock, memfd int) (s *sigSend, err error) {
	defer func() {
		if err != nil {
			closeFd(sock)
		}
		closeFd(memfd)
	}()
	if err := checkStreamSocket(sock); err != nil {
		return nil, err
	}
	mem, err := mapSealed(memfd, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("%w: bitmap: %w", errSigMalformed, err)
	}
	if len(mem) < (sigSummaryWords+1)*8 {
		munmap(mem)
		return nil, fmt.Errorf("%w: bitmap of %d bytes", errSigMalformed, len(mem))
	}
	s = &sigSend{fd: sock, mem: mem, w: words(mem), max: sigMaxIndex(len(mem))}
	s.refs.Store(1)
	return s, nil
}

// ring signals DMB index of the peer: data or space. It never blocks.
func (s *sigSend) ring(index, kind int) error {
	if index < 0 || index >= s.max {
		return fmt.Errorf("ism: DMB index %d outside the peer's signal area of %d", index, s.max)
	}
	bit := 2*index + kind
	wi := bit / 64
	atomic.OrUint64(&s.w[sigSummaryWords+wi], 1<<(bit%64))
	atomic.OrUint64(&s.w[wi/64], 1<<(wi%64))
	var one [1]byte
	for {
		err := sendNonblock(s.fd, one[:])
		switch err {
		case nil, syscall.EAGAIN:
			return nil // a full queue has wake-ups pending that cover our bit
		case syscall.EINTR:
			continue
		case syscall.ECONNREFUSED, syscall.EPIPE, syscall.ENOTCONN, syscall.ECONNRESET:
			return nil // the owner is gone: no one is left to wake
		}
		return os.NewSyscallError("send", err)
	}
}

func (s *sigSend) acquire() { s.refs.Add(1) }

func (s *sigSend) put() {
	if s.refs.Add(-1) == 0 {
		closeFd(s.fd)
		munmap(s.mem)
	}
}

// RemoteBell rings one doorbell of a peer's DMB through the peer device's signal channel.
type RemoteBell struct {
	s     *sigSend
	index int
	kind  int
}

// Ring signals the peer's DMB. It never blocks: it sets a bit in shared memory and sends
// one byte with MSG_DONTWAIT.
func (r *RemoteBell) Ring() error { return r.s.ring(r.index, r.kind) }
