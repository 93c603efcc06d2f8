package verbstest

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/verbs"
)

// end is one side of a test link: every object SMC-R's link setup makes.
type end struct {
	h        *Host
	dev      verbs.Device
	pd       verbs.PD
	ch       verbs.CompChannel
	scq, rcq verbs.CQ
	qp       verbs.QP
	mem      *verbs.Mem
	mr       verbs.MR
}

type linkOpts struct {
	memSize  int
	rnrRetry uint8
	cap      verbs.QPCap
	cqe      int
	access   verbs.Access
}

func defaultOpts() linkOpts {
	return linkOpts{
		memSize:  64 << 10,
		rnrRetry: verbs.RNRRetryInfinite,
		cap:      verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 64},
		cqe:      64,
		access:   verbs.AccessLocalWrite | verbs.AccessRemoteWrite,
	}
}

func newEnd(t testing.TB, f *Fabric, ip net.IP, o linkOpts) *end {
	t.Helper()
	h, err := f.NewHost(HostConfig{Device: "rxe0", IP: ip})
	require.NoError(t, err)
	e := &end{h: h}
	e.dev, err = h.Open("rxe0")
	require.NoError(t, err)
	e.pd, err = e.dev.AllocPD()
	require.NoError(t, err)
	e.ch, err = e.dev.CreateCompChannel()
	require.NoError(t, err)
	e.scq, err = e.dev.CreateCQ(o.cqe, e.ch)
	require.NoError(t, err)
	e.rcq, err = e.dev.CreateCQ(o.cqe, e.ch)
	require.NoError(t, err)
	e.qp, err = e.pd.CreateQP(verbs.QPConfig{SendCQ: e.scq, RecvCQ: e.rcq, Cap: o.cap})
	require.NoError(t, err)
	e.mem, err = verbs.NewMem(o.memSize)
	require.NoError(t, err)
	e.mr, err = e.pd.RegMR(e.mem, o.access)
	require.NoError(t, err)
	t.Cleanup(func() { e.close(t) })
	return e
}

// close releases everything in the order the verbs require and checks nothing is left.
func (e *end) close(t testing.TB) {
	t.Helper()
	require.NoError(t, e.qp.Close())
	require.NoError(t, e.mr.Close())
	require.NoError(t, e.scq.Close())
	require.NoError(t, e.rcq.Close())
	require.NoError(t, e.ch.Close())
	require.NoError(t, e.pd.Close())
	require.Equal(t, verbs.Counts{}, e.dev.Live())
	require.NoError(t, e.dev.Close())
	require.NoError(t, e.mem.Close())
	require.Equal(t, Counts{}, e.h.Live())
}

// connect brings a's queue pair to RTS towards b's, as smc_ib_ready_link does.
func connect(t testing.TB, a, b *end, o linkOpts) {
	t.Helper()
	require.NoError(t, a.qp.Init(verbs.InitAttr{Port: 1, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}))
	require.NoError(t, a.qp.ReadyToReceive(verbs.RTRAttr{
		Port: 1, PathMTU: verbs.MTU1024, DestQPN: b.qp.QPN(), RQPSN: 0x123, DestGID: b.h.GID().GID,
		SGIDIndex: uint8(a.h.GID().Index), HopLimit: 1,
	}))
	require.NoError(t, a.qp.ReadyToSend(verbs.RTSAttr{SQPSN: 0x456, Timeout: 30, RetryCnt: 7, RNRRetry: o.rnrRetry, MaxRdAtomic: 1}))
}

func newLink(t testing.TB, o linkOpts) (a, b *end) {
	t.Helper()
	f := NewFabric()
	a = newEnd(t, f, net.IPv4(10, 0, 0, 1), o)
	b = newEnd(t, f, net.IPv4(10, 0, 0, 2), o)
	connect(t, a, b, o)
	connect(t, b, a, o)
	return a, b
}

// poll takes every completion now in cq.
func poll(t testing.TB, cq verbs.CQ) []verbs.WC {
	t.Helper()
	var all []verbs.WC
	buf := make([]verbs.WC, 4)
	for {
		n, err := cq.Poll(buf)
		require.NoError(t, err)
		all = append(all, buf[:n]...)
		if n < len(buf) {
			return all
		}
	}
}

func (e *end) sge(off, n int) verbs.SGE {
	return verbs.SGE{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

func (e *end) postRecv(t testing.TB, id uint64, off, n int) {
	t.Helper()
	require.NoError(t, e.qp.PostRecv(&verbs.RecvWR{ID: id, SGE: []verbs.SGE{e.sge(off, n)}}))
}
