package ism

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smcloop/smcloop/internal/backoff"
	"github.com/smcloop/smcloop/shm"
)

// The device socket carries fixed 40-byte little-endian messages on a SOCK_SEQPACKET
// unix socket (host-local, so one byte order is enough):
//
//	request: magic u32 | version u16 | op u16 | token u64 | size u32 | flags u32 | sender GID 2×u64
//	reply:   magic u32 | version u16 | status u16 | token u64 | size u32 | index u32 | offset u64 | zero u64
//
// A successful attach reply carries the memfd of the slab that holds the DMB (slab.go):
// the DMB is the size bytes at offset, and index is its slot on the device, which names
// it in the signal channel (signal.go). An attach request with flagNeedSignal set asks
// for the signal channel too: the reply then also carries the socket end and the
// bitmap. An event request carries an ISM software event (code in size, info in token)
// from the sender's device. The magic and version are checked on every message, so
// devices of an incompatible layout refuse each other instead of misreading shared
// memory. Every exchange has a deadline: a hung peer device cannot hang us.
const (
	wireMagic   = 0x534d4344 // "SMCD"
	wireVersion = 2
	wireLen     = 40

	opQuery  = 1
	opAttach = 2
	opEvent  = 3

	exchangeTimeout = 5 * time.Second

	statusOK      = 0
	statusNoDMB   = 1
	statusBadSize = 2
	statusBadOp   = 3
)

type wireMsg struct {
	op    uint16 // request op or reply status
	token uint64
	size  uint32
	aux   uint32 // request: flags; attach reply: the DMB's index
	from  GID    // request: the sender; attach reply: Hi is the DMB's offset in the slab
}

func (m wireMsg) marshal() []byte {
	b := make([]byte, wireLen)
	binary.LittleEndian.PutUint32(b[0:], wireMagic)
	binary.LittleEndian.PutUint16(b[4:], wireVersion)
	binary.LittleEndian.PutUint16(b[6:], m.op)
	binary.LittleEndian.PutUint64(b[8:], m.token)
	binary.LittleEndian.PutUint32(b[16:], m.size)
	binary.LittleEndian.PutUint32(b[20:], m.aux)
	binary.LittleEndian.PutUint64(b[24:], m.from.Hi)
	binary.LittleEndian.PutUint64(b[32:], m.from.Ext)
	return b
}

func parseWire(b []byte) (wireMsg, error) {
	if len(b) != wireLen {
		return wireMsg{}, fmt.Errorf("ism: device message of %d bytes, want %d", len(b), wireLen)
	}
	if binary.LittleEndian.Uint32(b[0:]) != wireMagic || binary.LittleEndian.Uint16(b[4:]) != wireVersion {
		return wireMsg{}, errors.New("ism: device message with wrong magic or version")
	}
	return wireMsg{
		op:    binary.LittleEndian.Uint16(b[6:]),
		token: binary.LittleEndian.Uint64(b[8:]),
		size:  binary.LittleEndian.Uint32(b[16:]),
		aux:   binary.LittleEndian.Uint32(b[20:]),
		from:  GID{binary.LittleEndian.Uint64(b[24:]), binary.LittleEndian.Uint64(b[32:])},
	}, nil
}

func (d *Device) acceptLoop() {
	defer d.wg.Done()
	var retry backoff.Backoff
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return // Close
			}
			// Transient (EMFILE, ENFILE, ENOBUFS, ECONNABORTED...): back off and retry,
			// as net/http's Server.Serve does. A device that stopped accepting would
			// stall every peer that dials it until its exchange timeout.
			d.acceptRetries.Add(1)
			if !retry.Wait(d.done) {
				return
			}
			continue
		}
		retry.Reset()
		cred, err := shm.PeerCred(c)
		if err != nil || !samePrincipal(cred.Uid) {
			c.Close()
			continue
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			c.Close()
			return
		}
		d.serving[c] = struct{}{}
		d.wg.Add(1)
		d.mu.Unlock()
		go d.serve(c)
	}
}

// serve answers one peer device's requests until it hangs up or sends garbage.
//
// Each peer device keeps one connection to us for as long as it lives, so the end of
// that connection is the peer device going away: like an ISM GID event, it is reported
// to the event handler as EventPeerGone, and our own connection to that device is
// dropped. A device that we reached but that never sent us a request is seen going away
// by the peer watch, through the end of our connection to it.
func (d *Device) serve(c *net.UnixConn) {
	defer d.wg.Done()
	var from GID
	var sig *sigRecv // the peer's signal channel, made with its first attach
	defer func() {
		d.mu.Lock()
		delete(d.serving, c)
		if sig != nil {
			delete(d.sigs, sig)
		}
		closed := d.closed
		h := d.onEvent
		d.mu.Unlock()
		c.Close()
		if sig != nil {
			sig.close()
		}
		if !closed && !from.IsZero() {
			d.dropPeer(from)
			if h != nil {
				h(from, EventPeerGone, 0)
			}
		}
	}()
	buf := make([]byte, wireLen+1)
	for {
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			return
		}
		req, err := parseWire(buf[:n])
		if err != nil {
			return
		}
		if from.IsZero() {
			// The first request names the sender; the claim is checked once and binds
			// the connection (auth.go).
			if !d.verifyClaim(c, req.from) {
				return
			}
			from = req.from
		}
		req.from = from
		if err := d.answer(c, req, &sig); err != nil {
			return
		}
	}
}

// dropPeer closes and forgets our connection to the device g.
func (d *Device) dropPeer(g GID) {
	d.mu.Lock()
	p := d.peers[g]
	delete(d.peers, g)
	d.mu.Unlock()
	if p != nil {
		p.close()
	}
}

// answer answers one request of the verified peer device req.from. *sig is the
// connection's signal channel, made here on the first attach that asks for it.
func (d *Device) answer(c *net.UnixConn, req wireMsg, sig **sigRecv) error {
	switch req.op {
	case opQuery:
		return writeReply(c, wireMsg{op: statusOK})
	case opEvent:
		d.mu.Lock()
		h := d.onEvent
		d.mu.Unlock()
		if h != nil && !req.from.IsZero() {
			h(req.from, req.size, req.token)
		}
		return writeReply(c, wireMsg{op: statusOK})
	case opAttach:
		// Look the DMB up and pin its slab under the lock, then send without it and with
		// a deadline: a peer that stops reading can neither release the memory under us
		// nor hold the device. Answering takes no descriptor of ours: SCM_RIGHTS passes
		// the slab's memfd and the signal channel's ends as they are, so a process out of
		// descriptors still serves its peers' attaches.
		d.mu.Lock()
		m, ok := d.dmbs[req.token]
		var fds []int
		var pinned *slab
		var rep wireMsg
		switch {
		case !ok, !m.mayAttach(req.from):
			// A DMB issued to another device is refused as unknown: the answer tells
			// the asker nothing about tokens it was not given.
			rep = wireMsg{op: statusNoDMB, token: req.token}
		case int(req.size) != m.Size():
			rep = wireMsg{op: statusBadSize, token: req.token, size: uint32(m.Size())}
		default:
			rep = wireMsg{op: statusOK, token: req.token, size: uint32(m.Size()), aux: uint32(m.index),
				from: GID{Hi: uint64(m.slot) * uint64(m.Size())}}
			fds = []int{m.slab.memfd}
			if req.aux&flagNeedSignal != 0 {
				if *sig == nil {
					if s, err := d.newSigRecv(req.from); err == nil {
						*sig = s
						d.sigs[s] = struct{}{}
					} else {
						rep, fds = wireMsg{op: statusBadOp, token: req.token}, nil
					}
				}
				if *sig != nil {
					fds = append(fds, (*sig).remote, (*sig).memfd)
				}
			}
			if fds != nil {
				pinned = m.slab
				pinned.pins++
			}
		}
		d.mu.Unlock()
		if pinned != nil {
			defer func() {
				d.mu.Lock()
				pinned.pins--
				d.closeSlabLocked(pinned)
				d.mu.Unlock()
			}()
		}
		c.SetWriteDeadline(time.Now().Add(exchangeTimeout))
		defer c.SetWriteDeadline(time.Time{})
		if fds == nil {
			_, err := c.Write(rep.marshal())
			return err
		}
		// Counted before the reply goes out, so that a peer that has its DMB sees it
		// counted; taken back if the reply cannot be sent.
		d.attachesServed.Add(1)
		if err := shm.SendFds(c, rep.marshal(), fds...); err != nil {
			d.attachesServed.Add(^uint64(0))
			return err
		}
		return nil
	default:
		return writeReply(c, wireMsg{op: statusBadOp})
	}
}

// writeReply sends a reply without descriptors, with the deadline an attach reply has: a
// peer that stops reading cannot hold the device.
func writeReply(c *net.UnixConn, rep wireMsg) error {
	c.SetWriteDeadline(time.Now().Add(exchangeTimeout))
	defer c.SetWriteDeadline(time.Time{})
	_, err := c.Write(rep.marshal())
	return err
}

// peerConn is this device's connection to a remote device, one per remote GID, reused for
// every query and attach towards it (requests are serialised by mu).
type peerConn struct {
	d    *Device
	mu   sync.Mutex
	c    *net.UnixConn
	id   uint64       // c's entry in the peer watch, 0 if not watched
	dead bool         // dropped from the device's table
	gone atomic.Bool  // the device hung up on us (peerHungUp, which does not take mu)
	pid  atomic.Int32 // the remote device's process, once dialled (auth.go)
	sig  *sigSend     // the device's signal channel over c, from our first attach
	// hasSignal is sig != nil, for ReserveAttach, which does not take mu.
	hasSignal atomic.Bool
}

func (p *peerConn) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dead = true // a request queued behind us must not dial a connection nobody owns
	p.closeConnLocked()
}

// closeConnLocked closes the connection, if any, and takes it out of the peer watch.
// p.mu is held.
func (p *peerConn) closeConnLocked() {
	if p.c != nil {
		p.d.watch.forget(p.id)
		p.c.Close()
		p.c, p.id = nil, 0
	}
	if p.sig != nil {
		p.sig.put() // the device drops the channel with the connection
		p.sig = nil
		p.hasSignal.Store(false)
	}
}

func (d *Device) peer(g GID) (*peerConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	p, ok := d.peers[g]
	if !ok {
		p = &peerConn{d: d}
		d.peers[g] = p
	}
	return p, nil
}

// dialLocked (re)connects p to the device g. p.mu is held.
func (p *peerConn) dialLocked(g GID) error {
	if p.c != nil {
		return nil
	}
	if p.dead || p.gone.Load() {
		return fmt.Errorf("%w: %s: device gone", ErrUnreachable, g)
	}
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: g.socketName(), Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, g, err)
	}
	cred, err := shm.PeerCred(c)
	if err != nil {
		c.Close()
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, g, err)
	}
	if !samePrincipal(cred.Uid) {
		c.Close()
		return fmt.Errorf("%w: device %s runs as uid %d", ErrPermission, g, cred.Uid)
	}
	p.c = c
	p.pid.Store(cred.Pid)
	return nil
}

// roundTrip sends req and reads the reply with up to maxFds fds. On an I/O error the
// connection is dropped and, once, redialled: the remote device may have restarted.
func (d *Device) roundTrip(g GID, req wireMsg, maxFds int) (wireMsg, []int, error) {
	var fds []int
	rep, err := d.roundTripSig(g, req, maxFds, func(_ wireMsg, got []int, _ *sigSend) error {
		fds = got
		return nil
	})
	return rep, fds, err
}

// roundTripSig sends req and hands the reply and its fds to take, with p.mu held. For an
// attach it first asks for the device's signal channel if the connection has none yet,
// installs it from a successful reply, and gives take a reference to it and the slab's
// memfd alone; take owns them. If take fails, a signal channel that came with this reply
// is dropped again, so a failed attach leaves nothing behind.
func (d *Device) roundTripSig(g GID, req wireMsg, maxFds int, take func(rep wireMsg, fds []int, sig *sigSend) error) (wireMsg, error) {
	attach := req.op == opAttach
	req.from = d.gid
	p, err := d.peer(g)
	if err != nil {
		return wireMsg{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		if err := p.dialLocked(g); err != nil {
			d.mu.Lock()
			if d.peers[g] == p {
				delete(d.peers, g) // the device is gone: keep no entry for it
			}
			d.mu.Unlock()
			return wireMsg{}, err
		}
		if p.id == 0 {
			// Dialled here or by a claim check (auth.go): from now on its end is
			// watched.
			p.id = d.watchPeer(g, p, p.c)
		}
		if attach {
			req.aux = 0
			if p.sig == nil {
				req.aux = flagNeedSignal
			}
		}
		rep, fds, err := exchange(p.c, req, maxFds)
		if errors.Is(err, shm.ErrFdsDropped) {
			// Our descriptor table is full: the reply came whole, so the connection is
			// in step and stays (the device would take its end for our going away).
			return wireMsg{}, fmt.Errorf("ism: reply from %s: %w", g, err)
		}
		if err != nil {
			p.closeConnLocked()
			lastErr = err
			continue
		}
		var sig *sigSend
		fresh := p.sig == nil
		if attach && rep.op == statusOK {
			sig, fds, err = p.takeSignal(req, fds)
			if err != nil {
				err = fmt.Errorf("ism: attach reply from %s: %w", g, err)
			}
		}
		if err == nil {
			if err = take(rep, fds, sig); err != nil && sig != nil && fresh {
				p.sig.put()
				p.sig = nil
				p.hasSignal.Store(false)
			}
		}
		if p.gone.Load() {
			// The watch saw the device hang up meanwhile and left the connection to us.
			p.closeConnLocked()
		}
		return rep, err
	}
	return wireMsg{}, fmt.Errorf("%w: %s: %v", ErrUnreachable, g, lastErr)
}

// takeSignal installs the signal channel an attach reply carries, if req asked for one,
// and returns it with a reference for the caller, and the reply's other fds. p.mu is
// held.
func (p *peerConn) takeSignal(req wireMsg, fds []int) (*sigSend, []int, error) {
	want := 1
	if req.aux&flagNeedSignal != 0 {
		want = 3
	}
	if len(fds) != want {
		closeFds(fds)
		return nil, nil, fmt.Errorf("%w: %d fds, want %d", errSigMalformed, len(fds), want)
	}
	if want == 3 {
		s, err := newSigSend(fds[1], fds[2])
		if err != nil {
			closeFds(fds[:1])
			return nil, nil, err
		}
		p.sig = s
		p.hasSignal.Store(true)
	}
	p.sig.acquire()
	return p.sig, fds[:1], nil
}

// The peer watch. Our connections to peer devices (peerConn), idle between requests,
// are watched for their end in one epoll instance per device, which one goroutine waits
// for through Go's poller, as it would wait for a socket (the process's TCP liveness
// watcher works the same way). A device hangs up on us only when it goes away (its
// process died or it was closed: a live device serves us until we hang up), so the end
// of our connection to it is, like the end of its connection to us in serve, an ISM GID
// event: the connection is closed, the peer forgotten and EventPeerGone raised.
// Without it, a peer that we reached but that never sent us a request, such as a client
// killed after its proposal and before its own query of the server's device, would
// leave us our connection to it and its link group for as long as we live.
//
// Watching costs one epoll_ctl per connection and nothing to unwatch (closing the
// connection takes it out of the instance). Only the end is asked for (EPOLLRDHUP,
// edge-triggered), so requests and replies wake nobody. An event carries an id that
// maps to the connection; the id is forgotten when we close the connection, which makes
// a late event a no-op.
type peerWatch struct {
	mu     sync.Mutex
	ep     *os.File // the epoll instance, on Go's poller; nil until first needed
	rc     syscall.RawConn
	failed bool // no epoll instance, or the device closed: connections go unwatched
	next   uint64
	conns  map[uint64]watchedPeer
}

type watchedPeer struct {
	g GID
	p *peerConn
	c *net.UnixConn
}

// watchPeer puts c, p's connection to the device g, under the watch and returns its id,
// or 0 if it cannot be watched (then only the end of g's own connection to us, or the
// failure of a later request, tells us that g is gone). p.mu is held.
func (d *Device) watchPeer(g GID, p *peerConn, c *net.UnixConn) uint64 {
	w := &d.watch
	d.mu.Lock()
	w.mu.Lock()
	ok := !d.closed && w.startLocked(d)
	var id uint64
	if ok {
		w.next++
		id = w.next
		w.conns[id] = watchedPeer{g, p, c}
	}
	rc := w.rc
	w.mu.Unlock()
	d.mu.Unlock()
	if !ok {
		return 0
	}
	if err := watchConn(rc, c, id); err != nil {
		w.forget(id)
		return 0
	}
	return id
}

// forget takes the connection id (0: none) out of the watch.
func (w *peerWatch) forget(id uint64) {
	if id == 0 {
		return
	}
	w.mu.Lock()
	delete(w.conns, id)
	w.mu.Unlock()
}

// peerHungUp handles the end of our connection id to a peer device: the device is gone.
// It waits for no request in progress on the connection: closing the connection fails
// the request, which then finds the device gone and does not dial it again.
func (d *Device) peerHungUp(id uint64) {
	w := &d.watch
	w.mu.Lock()
	e, ok := w.conns[id]
	delete(w.conns, id)
	w.mu.Unlock()
	if !ok {
		return // we closed it meanwhile
	}
	e.p.gone.Store(true)
	e.c.Close()
	if e.p.mu.TryLock() {
		// No request in progress: drop the connection's hold on the signal channel now
		// (a request in progress sees gone and does it).
		e.p.closeConnLocked()
		e.p.mu.Unlock()
	}
	d.mu.Lock()
	if d.peers[e.g] == e.p {
		delete(d.peers, e.g)
	}
	closed := d.closed
	h := d.onEvent
	d.mu.Unlock()
	if !closed && h != nil {
		h(e.g, EventPeerGone, 0)
	}
}

// stopWatch closes the epoll instance, which ends the watch goroutine; connections
// dialled later go unwatched. d.mu must not be held: the close waits for an event being
// handled, which takes it.
func (d *Device) stopWatch() {
	w := &d.watch
	w.mu.Lock()
	ep := w.ep
	w.ep, w.failed = nil, true
	w.mu.Unlock()
	if ep != nil {
		ep.Close()
	}
}

func exchange(c *net.UnixConn, req wireMsg, maxFds int) (wireMsg, []int, error) {
	c.SetDeadline(time.Now().Add(exchangeTimeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(req.marshal()); err != nil {
		return wireMsg{}, nil, err
	}
	buf := make([]byte, wireLen+1)
	n, fds, err := shm.RecvFds(c, buf, maxFds)
	if err != nil {
		return wireMsg{}, nil, err
	}
	if n == 0 {
		return wireMsg{}, nil, syscall.ECONNRESET
	}
	rep, err := parseWire(buf[:n])
	if err != nil {
		closeFds(fds)
		return wireMsg{}, nil, err
	}
	return rep, fds, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		closeFd(fd)
	}
}

// QueryRemoteGID reports whether the device g is reachable from this one: it exists on
// this host, in this network namespace, and is run by the same user (query_remote_gid).
func (d *Device) QueryRemoteGID(g GID) error {
	if g.IsZero() {
		return fmt.Errorf("%w: zero GID", ErrUnreachable)
	}
	rep, fds, err := d.roundTrip(g, wireMsg{op: opQuery}, 0)
	closeFds(fds)
	if err != nil {
		return err
	}
	if rep.op != statusOK {
		return fmt.Errorf("%w: %s answered status %d", ErrUnreachable, g, rep.op)
	}
	return nil
}

// Software event codes (ISM SWR events used by SMC-D).
const (
	// EventShutdown: the sender terminated a link group with us (info = link group id
	// and the sender's role), so we terminate ours too.
	EventShutdown = 0x80
	// EventPeerGone is raised locally (never sent) when a peer device's connection to
	// us ends, or the device hangs up our connection to it: the device, and so its
	// process, is gone (an ISM GID event). It may come more than once for a device.
	EventPeerGone = 0x100
)

// SetEventHandler installs the function called (on one of the device's goroutines) for
// each software event a peer device signals, and for EventPeerGone. It must not block.
func (d *Device) SetEventHandler(h func(from GID, code uint32, info uint64)) {
	d.mu.Lock()
	d.onEvent = h
	d.mu.Unlock()
}

// SignalEvent sends a software event to the device g (signal_event).
func (d *Device) SignalEvent(g GID, code uint32, info uint64) error {
	rep, fds, err := d.roundTrip(g, wireMsg{op: opEvent, size: code, token: info}, 0)
	closeFds(fds)
	if err != nil {
		return err
	}
	if rep.op != statusOK {
		return fmt.Errorf("ism: event %#x refused by %s with status %d", code, g, rep.op)
	}
	return nil
}

// RemoteDMB is a peer's DMB mapped into this process (attach_dmb): the local side writes
// into it and rings its doorbells. It holds no descriptor: the slab's memfd is closed
// once the DMB is mapped, and the doorbells go through the peer device's signal channel,
// shared by every DMB attached from that device.
type RemoteDMB struct {
	token uint64
	mem   []byte
	size  int
	sig   *sigSend
	// Data and Space are the owner's doorbells: ring Data after publishing data or close
	// flags into the DMB, Space after consuming what the owner wrote into ours.
	Data, Space *RemoteBell
	once        sync.Once
}

// Token is the peer's DMB token.
func (r *RemoteDMB) Token() uint64 { return r.token }

// Bytes is the whole mapped DMB, CDC area included.
func (r *RemoteDMB) Bytes() []byte { return r.mem }

// Size is the DMB length.
func (r *RemoteDMB) Size() int { return r.size }

// MoveData copies p into the remote DMB at offset (move_data) and, if signal is set, rings
// the owner's data doorbell. Out-of-range requests are refused, never clipped.
func (r *RemoteDMB) MoveData(offset int, p []byte, signal bool) error {
	mem := r.mem
	if offset < 0 || offset > len(mem) || len(p) > len(mem)-offset {
		return fmt.Errorf("ism: move_data offset %d size %d outside DMB of %d bytes", offset, len(p), len(mem))
	}
	copy(mem[offset:], p)
	if signal {
		return r.Data.Ring()
	}
	return nil
}

// Detach unmaps the DMB and drops its hold on the signal channel (detach_dmb).
// Idempotent.
func (r *RemoteDMB) Detach() {
	r.once.Do(func() {
		munmap(r.mem)
		r.mem = nil
		r.sig.put()
	})
}

// AttachDMB maps the DMB token of the remote device g, which must be exactly size bytes.
func (d *Device) AttachDMB(g GID, token uint64, size int) (*RemoteDMB, error) {
	if !ValidDMBSize(size) {
		return nil, fmt.Errorf("ism: attach of DMB with invalid size %d", size)
	}
	var r *RemoteDMB
	_, err := d.roundTripSig(g, wireMsg{op: opAttach, token: token, size: uint32(size)}, 3, func(rep wireMsg, fds []int, sig *sigSend) error {
		defer closeFds(fds)
		switch {
		case rep.op == statusNoDMB:
			return fmt.Errorf("%w: token %#x on %s", ErrNoDMB, token, g)
		case rep.op != statusOK:
			return fmt.Errorf("ism: attach of %#x on %s refused with status %d (size %d)", token, g, rep.op, rep.size)
		}
		if rep.token != token || int(rep.size) != size || int(rep.aux) >= sig.max {
			sig.put()
			return fmt.Errorf("ism: malformed attach reply from %s (token %#x, size %d, index %d)", g, rep.token, rep.size, rep.aux)
		}
		mem, err := mapSealed(fds[0], int64(rep.from.Hi), size)
		if err != nil {
			sig.put()
			return err
		}
		idx := int(rep.aux)
		r = &RemoteDMB{token: token, mem: mem, size: size, sig: sig,
			Data: &RemoteBell{sig, idx, sigKindData}, Space: &RemoteBell{sig, idx, sigKindSpace}}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.attachesMade.Add(1)
	return r, nil
}
