package smcr

import (
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/verbs"
	"github.com/smcloop/smcloop/internal/verbs/verbstest"
)

// watchdog bounds every wait of these tests; none of them waits it out when it passes.
const watchdog = 10 * time.Second

// newDevice adds a host at ip to f and opens its device; the cleanup closes it and checks
// that nothing of the host is left open.
func newDevice(t testing.TB, f *verbstest.Fabric, ip net.IP) (*verbstest.Host, *Device) {
	t.Helper()
	h, err := f.NewHost(verbstest.HostConfig{Device: "rxe0", IP: ip})
	require.NoError(t, err)
	d, err := OpenDevice(h, "")
	require.NoError(t, err)
	t.Cleanup(func() {
		err := d.Close()
		require.NoError(t, err, "left: %+v (device %s)", h.Live(), ip)
		require.Equal(t, verbstest.Counts{}, h.Live(), "host objects left open")
	})
	return h, d
}

func testGroupConfig(role Role, peer *Device) GroupConfig {
	return GroupConfig{Role: role, Key: GroupKey{PeerGID: peer.GID()}, TestLinkInterval: -1, LLCTimeout: watchdog, SlotWait: watchdog}
}

// groupPair is a client and a server link group of ours on one fabric, linked and
// confirmed as the handshake would do it.
type groupPair struct {
	hc, hs *verbstest.Host
	dc, ds *Device
	c, s   *LinkGroup
}

func newGroupPair(t testing.TB, tweak func(role Role, cfg *GroupConfig)) *groupPair {
	t.Helper()
	f := verbstest.NewFabric()
	p := &groupPair{}
	p.hc, p.dc = newDevice(t, f, net.IPv4(10, 0, 0, 1))
	p.hs, p.ds = newDevice(t, f, net.IPv4(10, 0, 0, 2))
	ccfg, scfg := testGroupConfig(Client, p.ds), testGroupConfig(Server, p.dc)
	if tweak != nil {
		tweak(Client, &ccfg)
		tweak(Server, &scfg)
	}
	var err error
	p.c, err = p.dc.NewLinkGroup(ccfg)
	require.NoError(t, err)
	p.s, err = p.ds.NewLinkGroup(scfg)
	require.NoError(t, err)
	// The Accept carries the server's link, the Confirm the client's: the client's
	// queue pair is ready to receive before the server sends CONFIRM_LINK.
	require.NoError(t, p.c.Connect(p.s.Local()))
	require.NoError(t, p.s.Connect(p.c.Local()))
	errc := make(chan error, 1)
	go func() { errc <- p.c.AwaitConfirmLink() }()
	require.NoError(t, p.s.ConfirmLink())
	require.NoError(t, <-errc)
	require.True(t, p.c.Active())
	require.True(t, p.s.Active())
	return p
}

// connPair makes a connection on both groups with receive buffers of the sizes given,
// exchanged as the CLC would.
func (p *groupPair) connPair(t testing.TB, csize, ssize int, first bool) (cc, sc *Conn) {
	t.Helper()
	var err error
	sc, err = p.s.NewConn(ConnConfig{RMBSize: ssize, FirstContact: first})
	require.NoError(t, err)
	cc, err = p.c.NewConn(ConnConfig{RMBSize: csize, FirstContact: first})
	require.NoError(t, err)
	require.NoError(t, cc.Connect(bufferOf(sc)))
	require.NoError(t, sc.Connect(bufferOf(cc)))
	return cc, sc
}

func bufferOf(c *Conn) PeerBuffer {
	return PeerBuffer{Token: c.Token(), RKey: c.RMB().RKey(), Addr: c.RMB().Addr(), Size: c.RMB().Size()}
}

// eventually waits, yielding, until cond holds.
func eventually(t testing.TB, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(watchdog); !cond(); runtime.Gosched() {
		require.False(t, time.Now().After(end), "never: %s", what)
	}
}

// awaitDone waits for the group's link to be released.
func awaitDone(t testing.TB, g *LinkGroup) {
	t.Helper()
	select {
	case <-g.Done():
	case <-time.After(watchdog):
		t.Fatal("the link group never ended")
	}
}

// rawPeer is a scripted peer: a bare queue pair on its own host that the test drives
// message by message, to feed our link group exact bytes and read exact replies.
type rawPeer struct {
	h        *verbstest.Host
	dev      verbs.Device
	pd       verbs.PD
	ch       verbs.CompChannel
	scq, rcq verbs.CQ
	qp       verbs.QP
	mem      *verbs.Mem // rawRecvs receive slots, then send slots, then an RMB
	mr       verbs.MR
	sent     int
	wcs      []verbs.WC
}

const (
	rawRecvs   = 32
	rawSendOff = rawRecvs * WRBufSize
	rawRMBOff  = 8 << 10
	rawRMBSize = 16 << 10
)

func newRawPeer(t testing.TB, f *verbstest.Fabric, ip net.IP) *rawPeer {
	t.Helper()
	h, err := f.NewHost(verbstest.HostConfig{Device: "rxe0", IP: ip})
	require.NoError(t, err)
	p := &rawPeer{h: h, wcs: make([]verbs.WC, 8)}
	p.dev, err = h.Open("rxe0")
	require.NoError(t, err)
	p.pd, err = p.dev.AllocPD()
	require.NoError(t, err)
	p.ch, err = p.dev.CreateCompChannel()
	require.NoError(t, err)
	p.scq, err = p.dev.CreateCQ(64, p.ch)
	require.NoError(t, err)
	p.rcq, err = p.dev.CreateCQ(64, p.ch)
	require.NoError(t, err)
	p.qp, err = p.pd.CreateQP(verbs.QPConfig{SendCQ: p.scq, RecvCQ: p.rcq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: rawRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	p.mem, err = verbs.NewMem(rawRMBOff + rawRMBSize)
	require.NoError(t, err)
	p.mr, err = p.pd.RegMR(p.mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	require.NoError(t, p.qp.Init(verbs.InitAttr{Port: 1, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}))
	t.Cleanup(func() {
		p.qp.Close()
		p.mr.Close()
		p.scq.Close()
		p.rcq.Close()
		p.ch.Close()
		p.pd.Close()
		p.dev.Close()
		p.mem.Close()
	})
	return p
}

func (p *rawPeer) info() LinkInfo {
	var mac [6]byte
	e := p.h.GID()
	copy(mac[:], e.MAC)
	return LinkInfo{QPN: p.qp.QPN(), PSN: 0x777, GID: e.GID, MAC: mac, MTU: verbs.MTU1024}
}

// connect takes the peer's queue pair to RTS towards g and posts its receives.
func (p *rawPeer) connect(t testing.TB, g *LinkGroup) {
	t.Helper()
	l := g.Local()
	require.NoError(t, p.qp.ReadyToReceive(verbs.RTRAttr{Port: 1, PathMTU: verbs.MTU1024, DestQPN: l.QPN, RQPSN: l.PSN,
		DestGID: l.GID, SGIDIndex: uint8(p.h.GID().Index), HopLimit: 64}))
	require.NoError(t, p.qp.ReadyToSend(verbs.RTSAttr{SQPSN: 0x777, Timeout: 30, RetryCnt: 7, RNRRetry: verbs.RNRRetryInfinite, MaxRdAtomic: 1}))
	for i := range rawRecvs {
		p.postRecv(t, i)
	}
}

func (p *rawPeer) postRecv(t testing.TB, i int) {
	t.Helper()
	require.NoError(t, p.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGE: []verbs.SGE{{
		Addr: p.mr.Addr() + uint64(i*WRBufSize), Length: WRBufSize, LKey: p.mr.LKey()}}}))
}

// send sends msg as one SEND and requires that it did not fail.
func (p *rawPeer) send(t testing.TB, msg []byte) {
	t.Helper()
	off := rawSendOff + (p.sent%32)*WRBufSize
	p.sent++
	copy(p.mem.Bytes()[off:], msg)
	require.NoError(t, p.qp.PostSend(&verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.FlagSignaled,
		SGE: []verbs.SGE{{Addr: p.mr.Addr() + uint64(off), Length: uint32(len(msg)), LKey: p.mr.LKey()}}}))
	p.reapSends(t)
}

func (p *rawPeer) reapSends(t testing.TB) {
	t.Helper()
	for {
		n, err := p.scq.Poll(p.wcs)
		require.NoError(t, err)
		for _, wc := range p.wcs[:n] {
			require.NoError(t, wc.Err())
		}
		if n < len(p.wcs) {
			return
		}
	}
}

// recv waits for the next message from our side and returns a copy.
func (p *rawPeer) recv(t testing.TB) []byte {
	t.Helper()
	end := time.Now().Add(watchdog)
	for {
		require.NoError(t, p.rcq.ReqNotify(false))
		require.NoError(t, p.scq.ReqNotify(false))
		p.reapSends(t)
		n, err := p.rcq.Poll(p.wcs[:1])
		require.NoError(t, err)
		if n == 1 {
			wc := p.wcs[0]
			require.NoError(t, wc.Err())
			i := int(wc.ID)
			b := append([]byte(nil), p.mem.Bytes()[i*WRBufSize:i*WRBufSize+int(wc.ByteLen)]...)
			p.postRecv(t, i)
			return b
		}
		require.NoError(t, p.ch.SetDeadline(end))
		require.NoError(t, p.ch.Wait(), "no message from our side")
	}
}

// rmb is the peer's RMB, as its CLC would name it.
func (p *rawPeer) rmb(token uint32) PeerBuffer {
	return PeerBuffer{Token: token, RKey: p.mr.RKey(), Addr: p.mr.Addr() + rawRMBOff, Size: rawRMBSize}
}

// rawGroup is one link group of ours linked to a scripted peer.
func rawGroup(t testing.TB, role Role, tweak func(*GroupConfig)) (*verbstest.Host, *LinkGroup, *rawPeer) {
	t.Helper()
	f := verbstest.NewFabric()
	h, d := newDevice(t, f, net.IPv4(10, 0, 0, 1))
	p := newRawPeer(t, f, net.IPv4(10, 0, 0, 2))
	cfg := GroupConfig{Role: role, Key: GroupKey{PeerGID: p.info().GID}, TestLinkInterval: -1, LLCTimeout: watchdog, SlotWait: watchdog}
	if tweak != nil {
		tweak(&cfg)
	}
	g, err := d.NewLinkGroup(cfg)
	require.NoError(t, err)
	if role == Client {
		require.NoError(t, g.Connect(p.info()))
		p.connect(t, g)
	} else {
		p.connect(t, g)
		require.NoError(t, g.Connect(p.info()))
	}
	return h, g, p
}

// confirmed brings a rawGroup's link to active with the CONFIRM_LINK exchange.
func confirmed(t testing.TB, g *LinkGroup, p *rawPeer) {
	t.Helper()
	if g.Role() == Server {
		errc := make(chan error, 1)
		go func() { errc <- g.ConfirmLink() }()
		req := p.recv(t)
		req[3] |= byte(FlagResp)
		gid := [16]byte(p.info().GID)
		copy(req[10:26], gid[:])
		req[26], req[27], req[28] = byte(p.qp.QPN()>>16), byte(p.qp.QPN()>>8), byte(p.qp.QPN())
		p.send(t, req)
		require.NoError(t, <-errc)
	} else {
		errc := make(chan error, 1)
		go func() { errc <- g.AwaitConfirmLink() }()
		p.send(t, confirmLinkBytes(p, 0x03, 1))
		require.NoError(t, <-errc)
		require.Equal(t, byte(0x83), p.recv(t)[3])
	}
	require.True(t, g.Active())
}

// confirmLinkBytes is a CONFIRM_LINK from the scripted peer, built byte by byte.
func confirmLinkBytes(p *rawPeer, flags byte, linkNum byte) []byte {
	b := make([]byte, 44)
	b[0], b[1], b[3] = 0x01, 44, flags
	info := p.info()
	gid := [16]byte(info.GID)
	copy(b[4:10], info.MAC[:])
	copy(b[10:26], gid[:])
	b[26], b[27], b[28] = byte(info.QPN>>16), byte(info.QPN>>8), byte(info.QPN)
	b[29] = linkNum
	copy(b[30:34], "UID!")
	b[34] = 1
	return b
}

// cdcBytes is a CDC message built byte by byte.
func cdcBytes(seq uint16, token uint32, prodWrap uint16, prod uint32, consWrap uint16, cons uint32, pflags, cflags byte) []byte {
	b := make([]byte, 44)
	b[0], b[1] = 0xFE, 44
	binary.BigEndian.PutUint16(b[2:], seq)
	binary.BigEndian.PutUint32(b[4:], token)
	binary.BigEndian.PutUint16(b[10:], prodWrap)
	binary.BigEndian.PutUint32(b[12:], prod)
	binary.BigEndian.PutUint16(b[18:], consWrap)
	binary.BigEndian.PutUint32(b[20:], cons)
	b[24], b[25] = pflags, cflags
	return b
}
