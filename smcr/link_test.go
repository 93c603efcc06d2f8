package smcr

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/verbs"
	"github.com/smcloop/smcloop/internal/verbs/verbstest"
)

func TestOpenDevicePicksRoCEv2IPv4GID(t *testing.T) {
	f := verbstest.NewFabric()
	h, d := newDevice(t, f, net.IPv4(10, 0, 0, 9))
	assert.Equal(t, "rxe0", d.Name())
	assert.Equal(t, uint8(1), d.Port())
	assert.Equal(t, h.GID().GID, d.GID(), "the IPv4-mapped GID, not the link-local one at index 0")
	assert.Equal(t, uint32(1), d.GIDIndex())
	assert.Equal(t, "10.0.0.9", d.GID().IP().String())
	assert.Equal(t, net.HardwareAddr{0x02, 0x00, 10, 0, 0, 9}, d.MAC())
	assert.Equal(t, verbs.MTU1024, d.MTU())

	h2, err := f.NewHost(verbstest.HostConfig{Device: "rxe1", IP: net.IPv4(10, 0, 0, 10)})
	require.NoError(t, err)
	h2.SetPortState(verbs.PortDown)
	_, err = OpenDevice(h2, "rxe1")
	require.ErrorIs(t, err, verbs.ErrNoDevice)
	assert.Equal(t, verbstest.Counts{}, h2.Live(), "the device was closed again")
	_, err = OpenDevice(h2, "nosuch")
	require.ErrorIs(t, err, verbs.ErrNoDevice)
}

// TestConfirmLinkServer: the server sends CONFIRM_LINK (exact bytes) on the new link and
// the link is active once the client's response arrives.
func TestConfirmLinkServer(t *testing.T) {
	_, g, p := rawGroup(t, Server, nil)
	defer g.Close()
	errc := make(chan error, 1)
	go func() { errc <- g.ConfirmLink() }()
	req := p.recv(t)

	local := g.Local()
	want := make([]byte, 44)
	want[0], want[1], want[2], want[3] = 0x01, 44, 0, 0x03 // CONFIRM_LINK, v0, NO_RMBE_EYEC
	copy(want[4:10], local.MAC[:])
	gid := [16]byte(local.GID)
	copy(want[10:26], gid[:])
	want[26], want[27], want[28] = byte(local.QPN>>16), byte(local.QPN>>8), byte(local.QPN)
	want[29] = 1 // link_num
	copy(want[30:34], g.linkUID[:])
	want[34] = 1 // max_links
	require.Equal(t, want, req)
	assert.False(t, g.Active(), "active before the response")

	p.send(t, confirmLinkBytes(p, 0x83, 1))
	require.NoError(t, <-errc)
	assert.True(t, g.Active())
}

// TestConfirmLinkClient: the client answers the server's CONFIRM_LINK with the response
// flag and the link number the server gave, even when the request came before it waited.
func TestConfirmLinkClient(t *testing.T) {
	_, g, p := rawGroup(t, Client, nil)
	defer g.Close()
	p.send(t, confirmLinkBytes(p, 0x03, 7))
	eventually(t, func() bool { return g.Stats().LLCReceived == 1 }, "the request arrived")
	require.NoError(t, g.AwaitConfirmLink())
	resp := p.recv(t)
	local := g.Local()
	want := make([]byte, 44)
	want[0], want[1], want[3] = 0x01, 44, 0x83
	copy(want[4:10], local.MAC[:])
	gid := [16]byte(local.GID)
	copy(want[10:26], gid[:])
	want[26], want[27], want[28] = byte(local.QPN>>16), byte(local.QPN>>8), byte(local.QPN)
	want[29] = 7
	copy(want[30:34], g.linkUID[:])
	want[34] = 1
	require.Equal(t, want, resp)
	assert.True(t, g.Active())
}

func TestConfirmLinkRejected(t *testing.T) {
	t.Run("no response", func(t *testing.T) {
		_, g, p := rawGroup(t, Server, func(c *GroupConfig) { c.LLCTimeout = 20 * time.Millisecond })
		defer g.Close()
		errc := make(chan error, 1)
		go func() { errc <- g.ConfirmLink() }()
		p.recv(t)
		err := <-errc
		require.ErrorIs(t, err, ErrTimeout)
		assert.False(t, g.Active())
	})
	t.Run("no request", func(t *testing.T) {
		_, g, _ := rawGroup(t, Client, func(c *GroupConfig) { c.LLCTimeout = 10 * time.Millisecond })
		defer g.Close()
		start := time.Now()
		err := g.AwaitConfirmLink()
		require.ErrorIs(t, err, ErrTimeout)
		assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "twice the LLC timeout")
		assert.False(t, g.Active())
	})
	t.Run("no RMBE eyecatcher flag", func(t *testing.T) {
		_, g, p := rawGroup(t, Client, nil)
		defer g.Close()
		p.send(t, confirmLinkBytes(p, 0x00, 1))
		err := g.AwaitConfirmLink()
		require.ErrorIs(t, err, ErrProtocol)
		var pe *PeerError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "CONFIRM_LINK flags", pe.Field)
	})
	t.Run("wrong sender QP", func(t *testing.T) {
		_, g, p := rawGroup(t, Client, nil)
		defer g.Close()
		b := confirmLinkBytes(p, 0x03, 1)
		b[28]++
		p.send(t, b)
		require.ErrorIs(t, g.AwaitConfirmLink(), ErrProtocol)
	})
}

// TestTestLinkAnswered: a peer's TEST_LINK comes back with the response flag and the
// user data unchanged.
func TestTestLinkAnswered(t *testing.T) {
	_, g, p := rawGroup(t, Client, nil)
	defer g.Close()
	confirmed(t, g, p)
	req := make([]byte, 44)
	req[0], req[1] = 0x07, 44
	copy(req[4:20], "0123456789abcdef")
	p.send(t, req)
	want := append([]byte(nil), req...)
	want[3] = 0x80
	require.Equal(t, want, p.recv(t))
}

// TestTestLinkKeepalive: an idle link sends TEST_LINK after the testlink time; an answer
// keeps it up (the next TEST_LINK comes), a missing answer takes it down with a
// LinkError and releases every verbs object.
func TestTestLinkKeepalive(t *testing.T) {
	h, g, p := rawGroup(t, Server, func(c *GroupConfig) {
		c.TestLinkInterval = 5 * time.Millisecond
		c.LLCTimeout = 50 * time.Millisecond
	})
	confirmed(t, g, p)
	c, err := g.NewConn(ConnConfig{RMBSize: 16 << 10, FirstContact: true})
	require.NoError(t, err)
	require.NoError(t, c.Connect(p.rmb(9)))

	req := p.recv(t)
	require.Equal(t, byte(0x07), req[0], "TEST_LINK")
	require.Equal(t, byte(0x00), req[3], "a request")
	require.Equal(t, uint64(1), binary.BigEndian.Uint64(req[12:20]))
	resp := append([]byte(nil), req...)
	resp[3] = 0x80
	p.send(t, resp)

	req = p.recv(t) // the link lived on: the next keepalive
	require.Equal(t, byte(0x07), req[0])
	require.Equal(t, uint64(2), binary.BigEndian.Uint64(req[12:20]))
	// No answer this time: the link goes down and the peer is told.
	del := make([]byte, 44)
	del[0], del[1], del[3], del[4] = 0x04, 44, 0x40, 1 // DELETE_LINK, all, link 1
	binary.BigEndian.PutUint32(del[5:9], DelLostPath)
	require.Equal(t, del, p.recv(t))
	awaitDone(t, g)
	err = g.Err()
	require.ErrorIs(t, err, ErrLinkDown)
	require.ErrorIs(t, err, ErrTimeout)
	var le *LinkError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "TEST_LINK unanswered", le.What)
	assert.Equal(t, DelLostPath, le.Reason)
	assert.ErrorIs(t, c.Err(), ErrLinkDown, "the connection aborted with the link's error")
	assert.NotZero(t, c.PeerCons().ConnFlags&cdc.PeerConnAbort, "peer_conn_abort")
	assert.GreaterOrEqual(t, g.Stats().TestLinksSent, uint64(2))

	c.Close(false)
	assert.Equal(t, verbs.Counts{}, g.dev.Live(), "every object of the group released")
	assert.Equal(t, 1, h.Live().Devices)
}

// TestPeerDeleteLinkTerminates: a peer's DELETE_LINK for the group ends it with the
// peer's reason.
func TestPeerDeleteLinkTerminates(t *testing.T) {
	_, g, p := rawGroup(t, Client, nil)
	confirmed(t, g, p)
	b := make([]byte, 44)
	b[0], b[1], b[3], b[4] = 0x04, 44, 0x60, 1 // DELETE_LINK, all, orderly, link 1
	binary.BigEndian.PutUint32(b[5:9], DelProgInitTerm)
	p.send(t, b)
	awaitDone(t, g)
	var le *LinkError
	require.ErrorAs(t, g.Err(), &le)
	assert.Equal(t, DelProgInitTerm, le.Reason)
	assert.Equal(t, verbs.Counts{}, g.dev.Live())
}

// TestCloseSendsDeleteLink: an orderly close tells the peer with DELETE_LINK (all,
// orderly, reason SMC_LLC_DEL_OP_INIT_TERM).
func TestCloseSendsDeleteLink(t *testing.T) {
	_, g, p := rawGroup(t, Server, nil)
	confirmed(t, g, p)
	g.Close()
	want := make([]byte, 44)
	want[0], want[1], want[3], want[4] = 0x04, 44, 0x60, 1
	binary.BigEndian.PutUint32(want[5:9], DelOpInitTerm)
	require.Equal(t, want, p.recv(t))
	require.ErrorIs(t, g.Err(), ErrLinkDown)
	assert.Equal(t, verbs.Counts{}, g.dev.Live())
}

// TestAddLinkRejected: a one-link client sends the server's ADD_LINK back rejected, with
// the reason no alternate path.
func TestAddLinkRejected(t *testing.T) {
	_, g, p := rawGroup(t, Client, nil)
	defer g.Close()
	confirmed(t, g, p)
	b := make([]byte, 44)
	b[0], b[1], b[31] = 0x02, 44, 2 // ADD_LINK, link 2
	copy(b[4:10], "MACMAC")
	copy(b[12:28], "GIDGIDGIDGIDGID!")
	b[28], b[29], b[30], b[32], b[33], b[34], b[35] = 0, 0x12, 0x34, 3, 0, 0x56, 0x78
	p.send(t, b)
	want := append([]byte(nil), b...)
	want[2], want[3] = 0x01, 0xC0 // SMC_LLC_REJ_RSN_NO_ALT_PATH; response, rejected
	require.Equal(t, want, p.recv(t))
}

// TestRKeys: a second connection's new RMB is announced with CONFIRM_RKEY before it is
// used and withdrawn with DELETE_RKEY when it is freed (exact bytes); a reused RMB needs
// neither. The peer's rkeys are checked: a connection may name only one the peer
// confirmed, at its address, with an RMBE size.
func TestRKeys(t *testing.T) {
	_, g, p := rawGroup(t, Server, func(c *GroupConfig) { c.MaxFreeRMBs = 1 })
	defer g.Close()
	confirmed(t, g, p)
	first, err := g.NewConn(ConnConfig{RMBSize: 16 << 10, FirstContact: true})
	require.NoError(t, err)
	require.NoError(t, first.Connect(p.rmb(1)))

	type res struct {
		c   *Conn
		err error
	}
	newConn := func() <-chan res {
		ch := make(chan res, 1)
		go func() {
			c, err := g.NewConn(ConnConfig{RMBSize: 20 << 10})
			ch <- res{c, err}
		}()
		return ch
	}
	ch := newConn()
	req := p.recv(t)
	select {
	case r := <-ch:
		t.Fatalf("NewConn returned %v before the CONFIRM_RKEY response", r.err)
	default: // it waits for the response
	}
	resp := append([]byte(nil), req...)
	resp[3] = 0x80
	p.send(t, resp)
	r := <-ch
	require.NoError(t, r.err)
	second := r.c
	rmb := second.RMB()
	assert.Equal(t, 32<<10, rmb.Size(), "rounded up to an RMBE size")
	want := make([]byte, 44)
	want[0], want[1] = 0x06, 44 // CONFIRM_RKEY, num_rkeys 0
	binary.BigEndian.PutUint32(want[5:9], rmb.RKey())
	binary.BigEndian.PutUint64(want[9:17], rmb.Addr())
	require.Equal(t, want, req)

	// The peer's side: its CONFIRM_RKEY is stored and answered.
	peerReq := make([]byte, 44)
	peerReq[0], peerReq[1] = 0x06, 44
	binary.BigEndian.PutUint32(peerReq[5:9], 0xABCD)
	binary.BigEndian.PutUint64(peerReq[9:17], 0x10000)
	p.send(t, peerReq)
	peerResp := append([]byte(nil), peerReq...)
	peerResp[3] = 0x80
	require.Equal(t, peerResp, p.recv(t))

	for _, tc := range []struct {
		name  string
		buf   PeerBuffer
		field string
	}{
		{"unknown rkey", PeerBuffer{Token: 2, RKey: 0xBAD, Addr: 0x10000, Size: 16 << 10}, "rkey"},
		{"address not the confirmed one", PeerBuffer{Token: 2, RKey: 0xABCD, Addr: 0x20000, Size: 16 << 10}, "rmb_vaddr"},
		{"size not an RMBE size", PeerBuffer{Token: 2, RKey: 0xABCD, Addr: 0x10000, Size: 16<<10 + 1}, "rmbe_size"},
		{"range wraps", PeerBuffer{Token: 2, RKey: 0xABCD, Addr: ^uint64(0) - 100, Size: 16 << 10}, "rmb_vaddr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := second.Connect(tc.buf)
			require.ErrorIs(t, err, ErrProtocol)
			var pe *PeerError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.field, pe.Field)
		})
	}
	require.NoError(t, second.Connect(PeerBuffer{Token: 2, RKey: 0xABCD, Addr: 0x10000, Size: 16 << 10}))

	// The first RMB goes back to the pool (room for one): no LLC message. The second
	// finds the pool full and is withdrawn.
	first.Close(true)
	assert.Equal(t, 1, g.FreeRMBs())
	done := make(chan struct{})
	go func() { second.Close(true); close(done) }()
	del := p.recv(t)
	want = make([]byte, 44)
	want[0], want[1], want[4] = 0x09, 44, 1
	binary.BigEndian.PutUint32(want[8:12], rmb.RKey())
	require.Equal(t, want, del)
	del[3] = 0x80
	p.send(t, del)
	<-done

	// A reused RMB is not announced again: NewConn returns without LLC.
	again, err := g.NewConn(ConnConfig{RMBSize: 16 << 10})
	require.NoError(t, err)
	assert.Equal(t, 0, g.FreeRMBs())
	again.Close(true)

	// The peer withdraws one known and one unknown rkey.
	peerDel := make([]byte, 44)
	peerDel[0], peerDel[1], peerDel[4] = 0x09, 44, 2
	binary.BigEndian.PutUint32(peerDel[8:12], 0xABCD)
	binary.BigEndian.PutUint32(peerDel[12:16], 0xBAD)
	p.send(t, peerDel)
	delResp := append([]byte(nil), peerDel...)
	delResp[3], delResp[5] = 0xA0, 0x40 // response, RKEY_NEG; err_mask: the second
	require.Equal(t, delResp, p.recv(t))
}

// TestCDCExactBytes: PushProd writes the bytes into the peer's RMB with RDMA WRITE (two
// when they wrap) and then sends the CDC message; PublishCons sends one with the
// consumer cursor and flags.
func TestCDCExactBytes(t *testing.T) {
	_, g, p := rawGroup(t, Server, nil)
	defer g.Close()
	confirmed(t, g, p)
	c, err := g.NewConn(ConnConfig{RMBSize: 16 << 10, FirstContact: true})
	require.NoError(t, err)
	defer c.Close(true) // the scripted peer answers no DELETE_RKEY
	require.NoError(t, c.Connect(p.rmb(0x01020304)))
	require.Len(t, c.TxBuf(), rawRMBSize)
	require.Len(t, c.RxRing(), 16<<10)

	copy(c.TxBuf()[rawRMBSize-3:], "abc")
	copy(c.TxBuf(), "de")
	c.PushProd(cdcCursor(1, 2), rawRMBSize-3, 5)
	require.Equal(t, cdcBytes(1, 0x01020304, 1, 2, 0, 0, 0, 0), p.recv(t))
	peerRMB := p.mem.Bytes()[rawRMBOff : rawRMBOff+rawRMBSize]
	assert.Equal(t, "abc", string(peerRMB[rawRMBSize-3:]))
	assert.Equal(t, "de", string(peerRMB[:2]))

	c.PublishCons(consOf(cdcCursor(0, 77), 0x40, 0x01), 0)
	require.Equal(t, cdcBytes(2, 0x01020304, 1, 2, 0, 77, 0x40, 0x01), p.recv(t))
	assert.Equal(t, uint64(2), c.Counters().RingsSent)
	eventually(t, func() bool { return !c.TxPending() }, "both CDC messages completed")
}

// TestCDCReceive: CDC messages reach their connection by alert token; stale ones (an
// older sequence number, across the 16-bit wrap too) are dropped, unknown tokens
// ignored.
func TestCDCReceive(t *testing.T) {
	_, g, p := rawGroup(t, Client, nil)
	defer g.Close()
	confirmed(t, g, p)
	c, err := g.NewConn(ConnConfig{RMBSize: 16 << 10, FirstContact: true})
	require.NoError(t, err)
	defer c.Close(true) // the scripted peer answers no DELETE_RKEY
	require.NoError(t, c.Connect(p.rmb(1)))
	tok := c.Token()

	steps := []struct {
		seq   uint16
		prod  uint32
		stale bool
	}{
		{0xFFFD, 10, false},
		{0xFFFE, 20, false},
		{0xFFFD, 15, true}, // older
		{0xFFFF, 30, false},
		{0x0000, 40, false}, // wraps
		{0xFFFF, 35, true},  // before 0 after the wrap
		{0x0001, 50, false},
		{0x0001, 60, false}, // the same number again is not older
	}
	c.rxMu.Lock()
	c.rxSeq = 0xFFFC // as if the connection had come this far
	c.rxMu.Unlock()
	var stale uint64
	for i, s := range steps {
		p.send(t, cdcBytes(s.seq, tok, 0, s.prod, 0, 0, 0, 0))
		// An unknown token after each message marks when the goroutine got past it.
		p.send(t, cdcBytes(s.seq, tok+100, 0, 0, 0, 0, 0, 0))
		eventually(t, func() bool { return g.Stats().UnknownTokens == uint64(i+1) }, "the marker arrived")
		if s.stale {
			stale++
		} else {
			assert.Equal(t, s.prod, c.PeerProd().Count, "step %d", i)
		}
		assert.Equal(t, stale, g.Stats().StaleCDCs, "step %d", i)
	}
	assert.Equal(t, uint32(60), c.PeerProd().Count)

	// failover_validation makes an older one count.
	p.send(t, cdcBytes(0x0000, tok, 0, 70, 0, 0, byte(cdc.FailoverValidation), 0))
	eventually(t, func() bool { return c.PeerProd().Count == 70 }, "the failover validation CDC")

	// Malformed messages are dropped.
	p.send(t, append(cdcBytes(5, tok, 0, 80, 0, 0, 0, 0)[:1], make([]byte, 43)...)) // length 0
	eventually(t, func() bool { return g.Stats().Malformed == 1 }, "the malformed CDC dropped")
	assert.Equal(t, uint32(70), c.PeerProd().Count)
}

// TestCDCSeqWrap: between two groups of ours, sequence numbers that start near 0xFFFF
// wrap and every cursor arrives.
func TestCDCSeqWrap(t *testing.T) {
	p := newGroupPair(t, nil)
	defer p.c.Close()
	defer p.s.Close()
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	defer cc.Close(false)
	defer sc.Close(false)
	cc.txSeq = 0xFFFB
	sc.rxMu.Lock()
	sc.rxSeq = 0xFFFB
	sc.rxMu.Unlock()
	for i := 1; i <= 10; i++ {
		cc.TxBuf()[i] = byte(i)
		cc.PushProd(cdcCursor(0, uint32(i+1)), i, 1)
		eventually(t, func() bool { return sc.PeerProd().Count == uint32(i+1) }, "the cursor arrived")
		assert.Equal(t, byte(i), sc.RxRing()[i])
	}
	assert.Equal(t, uint16(0x0005), cc.txSeq)
	assert.Zero(t, p.s.Stats().StaleCDCs)
}

// TestSleeperWokenByCDC: a reader that announced and waits is woken by the peer's CDC
// message; a deadline ends a wait with os.ErrDeadlineExceeded.
func TestSleeperWokenByCDC(t *testing.T) {
	p := newGroupPair(t, nil)
	defer p.c.Close()
	defer p.s.Close()
	cc, sc := p.connPair(t, 16<<10, 16<<10, true)
	defer cc.Close(false)
	defer sc.Close(false)

	sc.Announce(readerDir)
	errc := make(chan error, 1)
	go func() { errc <- sc.Wait(readerDir) }()
	cc.PushProd(cdcCursor(0, 1), 0, 1)
	require.NoError(t, <-errc)
	sc.Retract(readerDir)

	sc.Announce(writerDir)
	require.NoError(t, sc.SetDeadline(writerDir, time.Now().Add(time.Millisecond)))
	assertDeadline(t, sc.Wait(writerDir))
	sc.Retract(writerDir)
}

// TestLinkFailureAbortsEveryConn: a failed queue pair, a killed peer host or lost
// completions take the link down; every connection of both groups aborts with the
// link's error (a waiting reader wakes), and once they are closed every verbs object is
// released.
func TestLinkFailureAbortsEveryConn(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(*GroupConfig)
		kill func(t *testing.T, p *groupPair, cc *Conn)
	}{
		{"FailQP", nil, func(t *testing.T, p *groupPair, cc *Conn) {
			require.NoError(t, p.hs.FailQP(p.s.QPN()))
			cc.PushProd(cdcCursor(0, 1), 0, 1) // meets the failed peer
		}},
		{"Kill", nil, func(t *testing.T, p *groupPair, cc *Conn) {
			p.hs.Kill()
			cc.PushProd(cdcCursor(0, 1), 0, 1) // RC retries run out
		}},
		{"DropCompletions", func(c *GroupConfig) { c.SlotWait = 20 * time.Millisecond }, func(t *testing.T, p *groupPair, cc *Conn) {
			require.NoError(t, p.hc.DropCompletions(p.c.QPN(), 2*SendSlots))
			for i := range SendSlots + 1 { // the last finds no free slot
				cc.PushProd(cdcCursor(0, uint32(i+1)), i, 1)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newGroupPair(t, func(r Role, c *GroupConfig) {
				if tc.cfg != nil && r == Client {
					tc.cfg(c)
				}
			})
			var cs, ss []*Conn
			for i := range 3 {
				cc, sc := p.connPair(t, 16<<10, 16<<10, i == 0)
				cs, ss = append(cs, cc), append(ss, sc)
			}
			cs[1].Announce(readerDir)
			woke := make(chan error, 1)
			go func() { woke <- cs[1].Wait(readerDir) }()

			tc.kill(t, p, cs[0])
			awaitDone(t, p.c)
			require.NoError(t, <-woke, "the sleeping reader woke")
			for _, c := range cs {
				assert.ErrorIs(t, c.Err(), ErrLinkDown)
				assert.NotZero(t, c.PeerCons().ConnFlags&cdc.PeerConnAbort, "peer_conn_abort")
				c.Close(false)
			}
			assert.Equal(t, verbs.Counts{}, p.dc.Live(), "client side released")
			if tc.name != "Kill" {
				// The server learns at its next send (its keepalive, here a push).
				ss[0].PushProd(cdcCursor(0, 1), 0, 1)
				awaitDone(t, p.s)
				for _, c := range ss {
					assert.ErrorIs(t, c.Err(), ErrLinkDown)
				}
			} else {
				p.s.Close()
			}
			for _, c := range ss {
				c.Close(false)
			}
			assert.Equal(t, verbs.Counts{}, p.ds.Live(), "server side released")
			var le *LinkError
			require.True(t, errors.As(p.c.Err(), &le))
		})
	}
}

// TestPeerRMBTooSmall: a peer whose CLC claims a larger RMB than it registered makes our
// RDMA WRITE past its region fail at its device (a remote access error): the link goes
// down with that completion error and every connection aborts, nothing is written out
// of bounds, nothing hangs.
func TestPeerRMBTooSmall(t *testing.T) {
	_, g, p := rawGroup(t, Server, nil)
	confirmed(t, g, p)
	c, err := g.NewConn(ConnConfig{RMBSize: 16 << 10, FirstContact: true})
	require.NoError(t, err)
	claim := p.rmb(3)
	claim.Size = 32 << 10 // the region ends 16 KiB after its start
	require.NoError(t, c.Connect(claim))
	c.PushProd(cdcCursor(0, 20<<10+10), 20<<10, 10)
	awaitDone(t, g)
	var ce *verbs.CompletionError
	require.ErrorAs(t, g.Err(), &ce)
	assert.Equal(t, verbs.StatusRemAccessErr, ce.Status)
	assert.ErrorIs(t, c.Err(), ErrLinkDown)
	c.Close(false)
	assert.Equal(t, verbs.Counts{}, g.dev.Live())
}

// TestCDCOrderUnderConcurrency: a writer's PushProd and a reader's PublishCons on two
// goroutines share the connection's sequence numbers; they reach the peer in order,
// each message carrying the other side's latest cursor, and none is stale.
func TestCDCOrderUnderConcurrency(t *testing.T) {
	_, g, p := rawGroup(t, Client, nil)
	defer g.Close()
	confirmed(t, g, p)
	c, err := g.NewConn(ConnConfig{RMBSize: 16 << 10, FirstContact: true})
	require.NoError(t, err)
	defer c.Close(true)
	require.NoError(t, c.Connect(p.rmb(5)))
	const n = 12 // both together stay within the peer's posted receives
	done := make(chan struct{}, 2)
	go func() {
		for i := 1; i <= n; i++ {
			c.PushProd(cdcCursor(0, uint32(i)), i-1, 1)
		}
		done <- struct{}{}
	}()
	go func() {
		for i := 1; i <= n; i++ {
			c.PublishCons(consOf(cdcCursor(0, uint32(100+i)), 0, 0), readerDir)
		}
		done <- struct{}{}
	}()
	var lastProd, lastCons uint32
	for seq := 1; seq <= 2*n; seq++ {
		m, err := ParseCDC(p.recv(t))
		require.NoError(t, err)
		require.Equal(t, uint16(seq), m.Seq, "in sequence")
		require.Equal(t, uint32(5), m.Token)
		require.GreaterOrEqual(t, m.Prod.Count, lastProd)
		require.GreaterOrEqual(t, m.Cons.Count, lastCons)
		lastProd, lastCons = m.Prod.Count, m.Cons.Count
	}
	<-done
	<-done
	assert.Equal(t, uint32(n), lastProd)
	assert.Equal(t, uint32(100+n), lastCons)
}

// TestCDCFlagsReceived: the flags of a peer's CDC message reach PeerCons as sent.
func TestCDCFlagsReceived(t *testing.T) {
	_, g, p := rawGroup(t, Client, nil)
	defer g.Close()
	confirmed(t, g, p)
	c, err := g.NewConn(ConnConfig{RMBSize: 16 << 10, FirstContact: true})
	require.NoError(t, err)
	defer c.Close(true)
	require.NoError(t, c.Connect(p.rmb(5)))
	p.send(t, cdcBytes(1, c.Token(), 2, 300, 1, 200, byte(cdc.WriteBlocked|cdc.ConsCursUpdReq), byte(cdc.PeerDoneWriting)))
	require.NoError(t, g.Sync())
	assert.Equal(t, cdcCursor(2, 300), c.PeerProd())
	assert.Equal(t, consOf(cdcCursor(1, 200), byte(cdc.WriteBlocked|cdc.ConsCursUpdReq), byte(cdc.PeerDoneWriting)), c.PeerCons())
}

// TestLongLLCv2: in a v2 link group a long LLC message (an ADD_LINK with its v2
// extension, 72 bytes) arrives in two receive entries and is read joined; the client
// sends it back rejected in 44 bytes, and the link lives on.
func TestLongLLCv2(t *testing.T) {
	_, g, p := rawGroup(t, Client, func(c *GroupConfig) { c.LLCVersion = LLCVersion2 })
	defer g.Close()
	confirmed(t, g, p)
	req := &AddLink{Version: LLCVersion2, LinkNum: 2, QPN: 0x1234, PSN: 0x5678, QPMTU: 3,
		Ext: &AddLinkExt{TargetGID: [16]byte{0xfe, 0x80}, NumRKeys: 1, RKeys: []RKeyPair{{RKey: 1, RKeyNew: 2, VAddrNew: 3}}}}
	b, err := req.Append(nil)
	require.NoError(t, err)
	require.Len(t, b, 88)
	require.Equal(t, []byte{0x22, 88, 0}, b[:3], "type 0x22, length_v2 88 little-endian")
	p.send(t, b)
	want := append([]byte(nil), b[:44]...)
	want[1], want[2], want[3] = 44, 0, 0xC0
	require.Equal(t, want, p.recv(t))
	assert.Zero(t, g.Stats().Malformed)

	// The link still works: a TEST_LINK is answered.
	tl := make([]byte, 44)
	tl[0], tl[1] = 0x27, 44
	p.send(t, tl)
	tl[3] = 0x80
	require.Equal(t, tl, p.recv(t))
	assert.NoError(t, g.Err())
}

// TestNoKeepaliveBeforeConfirm: a link whose setup has not completed sends no TEST_LINK;
// once CONFIRM_LINK made it active, its keepalive runs.
func TestNoKeepaliveBeforeConfirm(t *testing.T) {
	_, g, p := rawGroup(t, Client, func(c *GroupConfig) { c.TestLinkInterval = time.Millisecond })
	defer g.Close()
	// What is tested is that time passes without a TEST_LINK: twenty intervals.
	<-time.After(20 * time.Millisecond)
	require.NoError(t, g.Sync())
	assert.Zero(t, g.Stats().TestLinksSent)
	confirmed(t, g, p)
	req := p.recv(t)
	assert.Equal(t, byte(0x07), req[0], "TEST_LINK once active")
}
