package smcloop

import (
	"fmt"
	"net"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
)

// State is the SMC connection state, with the kernel's enum smc_state values.
type State uint8

// The states of the SMC close state machine (SMC-REFERENCE §8).
const (
	StateActive           State = 1
	StateInit             State = 2
	StateClosed           State = 7
	StateListen           State = 10
	StatePeerCloseWait1   State = 20
	StatePeerCloseWait2   State = 21
	StateAppCloseWait1    State = 22
	StateAppCloseWait2    State = 23
	StateAppFinCloseWait  State = 24
	StatePeerFinCloseWait State = 25
	StatePeerAbortWait    State = 26
	StateProcessAbort     State = 27
)

// String returns the name smcss prints.
func (s State) String() string {
	switch s {
	case StateActive:
		return "ACTIVE"
	case StateInit:
		return "INIT"
	case StateClosed:
		return "CLOSED"
	case StateListen:
		return "LISTEN"
	case StatePeerCloseWait1:
		return "PEERCLW1"
	case StatePeerCloseWait2:
		return "PEERCLW2"
	case StateAppCloseWait1:
		return "APPLCLW1"
	case StateAppCloseWait2:
		return "APPLCLW2"
	case StateAppFinCloseWait:
		return "APPLFINCLW"
	case StatePeerFinCloseWait:
		return "PEERFINCLW"
	case StatePeerAbortWait:
		return "PEERABORTW"
	case StateProcessAbort:
		return "PROCESSABORT"
	}
	return fmt.Sprintf("STATE(%d)", uint8(s))
}

type closeEvent uint8

const (
	evAppClose        closeEvent = iota // Close
	evAppShutWr                         // CloseWrite
	evPeerDoneWriting                   // peer_done_writing seen
	evPeerClosed                        // peer_conn_closed seen
	evPeerAbort                         // peer_conn_abort seen
	evLocalAbort                        // protocol violation (smc_close_active_abort)
)

// transition is one step of the close state machine: the next state and the
// connection-state flag to send the peer (0 for none).
type transition struct {
	next State
	send cdc.ConnFlags
}

// closeStep is the SMC close state machine (net/smc/smc_close.c) as a pure function.
// shutWr says that we have sent done_writing but no close yet; peerClosed that the peer
// has sent its close (not only done_writing).
func closeStep(s State, ev closeEvent, shutWr, peerClosed bool) transition {
	switch ev {
	case evAppClose: // smc_close_active
		switch s {
		case StateInit:
			return transition{StateClosed, 0}
		case StateActive:
			return transition{StatePeerCloseWait1, cdc.PeerConnClosed}
		case StateAppCloseWait1, StateAppCloseWait2:
			if peerClosed {
				return transition{StateClosed, cdc.PeerConnClosed}
			}
			return transition{StatePeerFinCloseWait, cdc.PeerConnClosed}
		case StateAppFinCloseWait:
			if shutWr {
				return transition{StateClosed, cdc.PeerConnClosed}
			}
			return transition{StateClosed, 0}
		case StatePeerCloseWait1, StatePeerCloseWait2:
			if shutWr {
				return transition{s, cdc.PeerConnClosed}
			}
			return transition{s, 0}
		case StateProcessAbort:
			return transition{StateClosed, cdc.PeerConnAbort}
		case StatePeerAbortWait:
			return transition{StateClosed, 0}
		}
	case evAppShutWr: // smc_close_shutdown_write
		switch s {
		case StateActive:
			return transition{StatePeerCloseWait1, cdc.PeerDoneWriting}
		case StateAppCloseWait1:
			return transition{StateAppCloseWait2, cdc.PeerDoneWriting}
		}
	case evPeerAbort: // smc_close_passive_work, abort received
		switch s {
		case StateInit, StateActive, StateAppCloseWait1, StateAppFinCloseWait:
			return transition{StateProcessAbort, 0}
		case StatePeerCloseWait1, StatePeerCloseWait2:
			if shutWr {
				return transition{StateProcessAbort, 0}
			}
			return transition{StateClosed, 0}
		case StateAppCloseWait2, StatePeerFinCloseWait, StatePeerAbortWait:
			return transition{StateClosed, 0}
		}
	case evPeerDoneWriting, evPeerClosed: // smc_close_passive_work
		switch s {
		case StateInit, StateActive:
			return transition{StateAppCloseWait1, 0}
		case StatePeerCloseWait1, StatePeerCloseWait2:
			if ev == evPeerDoneWriting {
				return transition{StatePeerCloseWait2, 0}
			}
			if shutWr {
				return transition{StateAppFinCloseWait, 0}
			}
			return transition{StateClosed, 0}
		case StatePeerFinCloseWait:
			if ev == evPeerClosed {
				return transition{StateClosed, 0}
			}
		}
	case evLocalAbort: // smc_close_active_abort
		switch s {
		case StateActive, StateAppCloseWait1, StateAppCloseWait2:
			return transition{StatePeerAbortWait, cdc.PeerConnAbort}
		case StatePeerCloseWait1, StatePeerCloseWait2, StatePeerFinCloseWait,
			StateProcessAbort, StateAppFinCloseWait:
			return transition{StateClosed, cdc.PeerConnAbort}
		}
	}
	return transition{s, 0}
}

// State returns the connection's close state (StateActive while open; fallback
// connections report StateActive until closed).
func (c *Conn) State() State {
	c, err := c.resolve("state")
	if err != nil {
		return StateClosed
	}
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	return c.ctl.state
}

// applyLocked runs one event through the state machine and publishes any flag it sends.
// ctl.mu is held.
func (c *Conn) applyLocked(ev closeEvent) {
	t := closeStep(c.ctl.state, ev, c.ctl.sentDoneWriting, c.ctl.peerFlags&(cdc.PeerConnClosed|cdc.PeerConnAbort) != 0)
	c.ctl.state = t.next
	if t.send != 0 {
		c.ctl.msg.ConnFlags |= t.send
		c.publishCtlLocked(datapath.Reader | datapath.Writer)
	}
}

// observePeer applies newly seen peer connection-state flags to the state machine.
func (c *Conn) observePeer(cf cdc.ConnFlags) {
	cf &= peerStopFlags
	if cf == 0 {
		return // nothing to apply, as on every Read of an open connection: no lock
	}
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	fresh := cf &^ c.ctl.peerFlags
	if fresh == 0 {
		return
	}
	c.ctl.peerFlags |= fresh
	if fresh&cdc.PeerDoneWriting != 0 {
		c.applyLocked(evPeerDoneWriting)
	}
	if fresh&cdc.PeerConnClosed != 0 {
		c.applyLocked(evPeerClosed)
	}
	if fresh&cdc.PeerConnAbort != 0 {
		c.applyLocked(evPeerAbort)
	}
}

// Close closes the connection. On SMC it sends the close (peer_conn_closed, or
// peer_conn_abort if unread data is left in our buffer), wakes and waits out any
// blocked Read or Write, closes the TCP connection (with a reset where the peer can have
// nothing left to read on it) and releases both buffers.
func (c *Conn) Close() error {
	if c == nil {
		return nilConnError("close")
	}
	if c.pending != nil {
		return c.closePending()
	}
	if !c.closed.CompareAndSwap(false, true) {
		return c.opError("close", net.ErrClosed)
	}
	c.untrack() // registry.go: before anything is released
	c.rx.deadline.stop()
	c.tx.deadline.stop()
	if !c.isSMC() {
		if c.ticket != nil {
			c.ticket.Cancel() // a no-op once the listener took it
		}
		return c.tcp.Close()
	}
	c.backend.WakeLocal()
	c.tx.mu.Lock() // a Write still running may start the flusher; none can after this
	fl := c.tx.flusher
	c.tx.mu.Unlock()
	if fl != nil {
		close(fl.closing) // a flusher asleep was rung by WakeLocal: it checks closed before it sleeps
		<-fl.done
	}
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	c.pushLocked() // what was written goes out before the close (the kernel drains)

	unread, err := c.refreshRx()
	c.observePeer(c.backend.PeerCons().ConnFlags)
	c.ctl.mu.Lock()
	t := closeStep(c.ctl.state, evAppClose, c.ctl.sentDoneWriting, c.ctl.peerFlags&(cdc.PeerConnClosed|cdc.PeerConnAbort) != 0)
	if t.send == cdc.PeerConnClosed && (unread > 0 || err != nil) {
		t.send = cdc.PeerConnAbort // close final with unread data is an abort
	}
	c.ctl.state = t.next
	if t.send != 0 {
		c.ctl.msg.ConnFlags |= t.send
		c.publishCtlLocked(datapath.Reader | datapath.Writer)
	}
	peerDone := c.ctl.peerFlags&(cdc.PeerConnClosed|cdc.PeerConnAbort) != 0
	c.ctl.mu.Unlock()

	if c.server || peerDone {
		// Nothing on the CLC socket is left for the peer to read, so it is released with
		// a reset: no FIN exchange and no TIME_WAIT on either side. A server connection
		// exists only once the client's Confirm, its last CLC message, was read, and the
		// client reads nothing from TCP after it. A client resets only after the server
		// published its close or abort flag, which it does only once established, i.e.
		// after reading our Confirm. Otherwise a FIN keeps the Confirm readable for a
		// server that has not read it yet.
		if tc, ok := c.tcp.Conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
	c.tcp.Close() // after the close flags: the peer learns of the close before the EOF
	c.unwatch()
	c.ctl.mu.Lock()
	peerDone = c.ctl.peerFlags&(cdc.PeerConnClosed|cdc.PeerConnAbort) != 0
	c.ctl.mu.Unlock()
	if c.deferClose(peerDone) { // else the end of the last lease or reservation does it
		elasticConns.remove(c)
		c.backend.Close(peerDone)
	}
	return nil
}

// CloseWrite shuts down the writing side (shutdown(SHUT_WR)): the peer reads the bytes
// written so far and then io.EOF, and may keep writing to us. On SMC the TCP connection
// stays fully open: it is the liveness channel.
func (c *Conn) CloseWrite() error {
	c, err := c.resolve("close")
	if err != nil {
		return err
	}
	if !c.isSMC() {
		if tc, ok := c.tcp.Conn.(interface{ CloseWrite() error }); ok { // TCP or unix
			return tc.CloseWrite()
		}
		return c.opError("close", fmt.Errorf("CloseWrite not supported on %T", c.tcp.Conn))
	}
	if c.closed.Load() {
		return c.opError("close", net.ErrClosed)
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	if c.tx.shut.Swap(true) {
		return nil
	}
	c.pushLocked() // corked or autocorked bytes go out before done_writing
	c.ctl.mu.Lock()
	c.applyLocked(evAppShutWr)
	c.ctl.sentDoneWriting = true
	c.ctl.mu.Unlock()
	return nil
}

// CloseRead shuts down the reading side locally (shutdown(SHUT_RD)): further Reads
// return io.EOF. The peer is not told, as with SMC.
func (c *Conn) CloseRead() error {
	c, err := c.resolve("close")
	if err != nil {
		return err
	}
	if !c.isSMC() {
		if tc, ok := c.tcp.Conn.(interface{ CloseRead() error }); ok { // TCP or unix
			return tc.CloseRead()
		}
		return c.opError("close", fmt.Errorf("CloseRead not supported on %T", c.tcp.Conn))
	}
	if c.closed.Load() {
		return c.opError("close", net.ErrClosed)
	}
	c.rx.shut.Store(true)
	c.backend.WakeLocal()
	return nil
}
