package verbstest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/verbs"
)

func TestQueryPort(t *testing.T) {
	a, _ := newLink(t, defaultOpts())
	attr, err := a.dev.QueryPort(1)
	require.NoError(t, err)
	assert.Equal(t, verbs.PortActive, attr.State)
	assert.Equal(t, verbs.MTU1024, attr.ActiveMTU)
	assert.Equal(t, verbs.LinkLayerEthernet, attr.LinkLayer)
	g, ok := attr.GID(verbs.GIDTypeRoCEv2)
	require.True(t, ok)
	assert.Equal(t, uint32(0), g.Index, "the first RoCE v2 GID is the link-local one")
	assert.Equal(t, net.HardwareAddr{0x02, 0x00, 10, 0, 0, 1}, g.MAC)
	assert.Equal(t, "10.0.0.1", a.h.GID().GID.String())
	assert.Equal(t, uint32(1), a.h.GID().Index)
	_, ok = attr.GID(verbs.GIDTypeRoCEv1)
	assert.False(t, ok, "RoCE v2 only, as rxe")

	_, err = a.dev.QueryPort(2)
	assert.ErrorIs(t, err, syscall.EINVAL)
	a.h.SetPortState(verbs.PortDown)
	attr, err = a.dev.QueryPort(1)
	require.NoError(t, err)
	assert.Equal(t, verbs.PortDown, attr.State)
}

func TestOpenUnknownDevice(t *testing.T) {
	h, err := NewFabric().NewHost(HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 1)})
	require.NoError(t, err)
	names, err := h.Devices()
	require.NoError(t, err)
	assert.Equal(t, []string{"rxe0"}, names)
	_, err = h.Open("mlx5_0")
	assert.ErrorIs(t, err, verbs.ErrNoDevice)
	var ve *verbs.Error
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "ibv_open_device", ve.Op)
}

func TestNewHostRejects(t *testing.T) {
	f := NewFabric()
	_, err := f.NewHost(HostConfig{Device: "rxe0", IP: net.ParseIP("fe80::1")})
	assert.ErrorIs(t, err, syscall.EINVAL)
	_, err = f.NewHost(HostConfig{IP: net.IPv4(10, 0, 0, 1)})
	assert.ErrorIs(t, err, syscall.EINVAL)
	_, err = f.NewHost(HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 1), MTU: 6})
	assert.ErrorIs(t, err, syscall.EINVAL)
	_, err = f.NewHost(HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 1), GIDType: 3})
	assert.ErrorIs(t, err, syscall.EINVAL)
	_, err = f.NewHost(HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 1)})
	require.NoError(t, err)
	_, err = f.NewHost(HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 1)})
	assert.ErrorIs(t, err, syscall.EINVAL)
}

// The fake's completion channel runs on the bubble's clock: a deadline an hour away
// passes at once, deterministically.
func TestCompChannelSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newLink(t, defaultOpts())
		start := time.Now()
		require.NoError(t, b.ch.SetDeadline(start.Add(time.Hour)))
		assert.ErrorIs(t, b.ch.Wait(), os.ErrDeadlineExceeded)
		assert.Equal(t, time.Hour, time.Since(start))

		require.NoError(t, b.ch.SetDeadline(time.Time{}))
		require.NoError(t, b.rcq.ReqNotify(false))
		b.postRecv(t, 1, 0, 8)
		done := make(chan error)
		go func() { done <- b.ch.Wait() }()
		synctest.Wait() // the waiter is parked
		require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Inline: []byte("x")}))
		require.NoError(t, <-done)
		assert.Len(t, poll(t, b.rcq), 1)
	})
}

// One side RDMA WRITEs into the peer's region and then SENDs a 44-byte CDC-sized
// message inline, as smc_tx_rdma_writes and smc_cdc_msg_send do; the receiver is woken
// through its armed, solicited-only receive CQ.
func TestWriteThenSend(t *testing.T) {
	o := defaultOpts()
	o.memSize = 1 << 20
	a, b := newLink(t, o)
	src := a.mem.Bytes()
	rand.NewChaCha8([32]byte{1}).Read(src)
	b.postRecv(t, 7, 0, 64) // lands the CDC message at the start of b's region
	require.NoError(t, b.rcq.ReqNotify(true))

	require.NoError(t, a.qp.PostSend(&verbs.SendWR{
		ID: 1, Opcode: verbs.OpRDMAWrite, SGE: []verbs.SGE{a.sge(0, 1<<19), a.sge(1<<19, 1<<19)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
	}))
	assert.Empty(t, poll(t, b.rcq), "an RDMA WRITE completes nothing at the responder")
	assert.Equal(t, sha256.Sum256(src), sha256.Sum256(b.mem.Bytes()))

	cdc := bytes.Repeat([]byte{0xfe}, 44)
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Flags: verbs.FlagSignaled | verbs.FlagSolicited, Inline: cdc}))
	require.NoError(t, b.ch.Wait())
	assert.Equal(t, []verbs.WC{{ID: 7, Opcode: verbs.WCRecv, ByteLen: 44, QPN: b.qp.QPN()}}, poll(t, b.rcq))
	assert.Equal(t, cdc, b.mem.Bytes()[:44])
	assert.Equal(t, []verbs.WC{{ID: 2, Opcode: verbs.WCSend, QPN: a.qp.QPN()}}, poll(t, a.scq), "only the signaled SEND completes")
}

// A receive CQ armed solicited-only raises no event for an unsolicited SEND, and an
// unarmed CQ none at all; completions are there for Poll either way.
func TestNotifySolicitedOnly(t *testing.T) {
	a, b := newLink(t, defaultOpts())
	b.postRecv(t, 1, 0, 64)
	b.postRecv(t, 2, 64, 64)
	require.NoError(t, b.rcq.ReqNotify(true))
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Inline: []byte("x")}))
	require.NoError(t, b.ch.SetDeadline(time.Unix(1, 0)))
	assert.ErrorIs(t, b.ch.Wait(), os.ErrDeadlineExceeded)
	require.NoError(t, b.ch.SetDeadline(time.Time{}))
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Flags: verbs.FlagSolicited, Inline: []byte("y")}))
	require.NoError(t, b.ch.Wait())
	wcs := poll(t, b.rcq)
	require.Len(t, wcs, 2)
	assert.Equal(t, []uint64{1, 2}, []uint64{wcs[0].ID, wcs[1].ID})
}

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name   string
		access verbs.Access
		mutate func(b *end, wr *verbs.SendWR)
	}{
		{"bad rkey", verbs.AccessLocalWrite | verbs.AccessRemoteWrite, func(b *end, wr *verbs.SendWR) { wr.RKey++ }},
		{"before the region", verbs.AccessLocalWrite | verbs.AccessRemoteWrite, func(b *end, wr *verbs.SendWR) { wr.RemoteAddr-- }},
		{"past the region", verbs.AccessLocalWrite | verbs.AccessRemoteWrite, func(b *end, wr *verbs.SendWR) { wr.RemoteAddr += uint64(b.mr.Len()) - 8 }},
		{"no remote write", verbs.AccessLocalWrite, func(b *end, wr *verbs.SendWR) {}},
		{"deregistered", verbs.AccessLocalWrite | verbs.AccessRemoteWrite, func(b *end, wr *verbs.SendWR) {
			mr, err := b.pd.RegMR(b.mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			require.NoError(t, err)
			wr.RKey = mr.RKey()
			require.NoError(t, mr.Close())
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := defaultOpts()
			o.access = c.access
			a, b := newLink(t, o)
			b.postRecv(t, 9, 0, 64)
			wr := &verbs.SendWR{ID: 5, Opcode: verbs.OpRDMAWrite, SGE: []verbs.SGE{a.sge(0, 16)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			c.mutate(b, wr)
			require.NoError(t, a.qp.PostSend(wr))
			wcs := poll(t, a.scq)
			require.Len(t, wcs, 1)
			assert.Equal(t, verbs.StatusRemAccessErr, wcs[0].Status)
			assert.Equal(t, uint64(5), wcs[0].ID)
			var ce *verbs.CompletionError
			require.ErrorAs(t, wcs[0].Err(), &ce)
			assert.Equal(t, verbs.StatusRemAccessErr, ce.Status)
			assert.NotErrorIs(t, wcs[0].Err(), verbs.ErrFlushed)
			for _, e := range []*end{a, b} {
				s, err := e.qp.State()
				require.NoError(t, err)
				assert.Equal(t, verbs.QPErr, s)
			}
			assert.Equal(t, []verbs.WC{{ID: 9, Status: verbs.StatusWRFlushErr, Opcode: verbs.WCRecv, QPN: b.qp.QPN()}}, poll(t, b.rcq))
		})
	}
}

func TestLocalProtectionError(t *testing.T) {
	a, b := newLink(t, defaultOpts())
	b.postRecv(t, 1, 0, 64)
	sge := a.sge(0, 16)
	sge.LKey = b.mr.LKey() // another host's key
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.OpSend, Flags: verbs.FlagSignaled, SGE: []verbs.SGE{sge}}))
	assert.Equal(t, []verbs.WC{{ID: 3, Status: verbs.StatusLocProtErr, Opcode: verbs.WCSend, QPN: a.qp.QPN()}}, poll(t, a.scq))
	assert.Empty(t, poll(t, b.rcq), "nothing reached the peer")
}

func TestReceiveTooSmall(t *testing.T) {
	a, b := newLink(t, defaultOpts())
	b.postRecv(t, 1, 0, 8)
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.OpSend, Inline: make([]byte, 44)}))
	assert.Equal(t, []verbs.WC{{ID: 1, Status: verbs.StatusLocLenErr, Opcode: verbs.WCRecv, QPN: b.qp.QPN()}}, poll(t, b.rcq))
	assert.Equal(t, []verbs.WC{{ID: 3, Status: verbs.StatusRemInvReqErr, Opcode: verbs.WCSend, QPN: a.qp.QPN()}}, poll(t, a.scq))
}

// With an infinite RNR retry a SEND waits for a receive, and an RDMA WRITE posted after
// it waits behind it (RC keeps order); with a finite one the SEND fails.
func TestReceiverNotReady(t *testing.T) {
	t.Run("infinite", func(t *testing.T) {
		a, b := newLink(t, defaultOpts())
		copy(a.mem.Bytes()[100:], "written")
		require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.FlagSignaled, Inline: []byte("cdc")}))
		require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWrite, Flags: verbs.FlagSignaled, SGE: []verbs.SGE{a.sge(100, 7)}, RemoteAddr: b.mr.Addr() + 1000, RKey: b.mr.RKey()}))
		assert.Empty(t, poll(t, a.scq))
		assert.Equal(t, make([]byte, 7), b.mem.Bytes()[1000:1007], "the WRITE waits behind the SEND")
		b.postRecv(t, 9, 0, 64)
		assert.Equal(t, []verbs.WC{{ID: 9, Opcode: verbs.WCRecv, ByteLen: 3, QPN: b.qp.QPN()}}, poll(t, b.rcq))
		assert.Equal(t, []verbs.WC{{ID: 1, Opcode: verbs.WCSend, QPN: a.qp.QPN()}, {ID: 2, Opcode: verbs.WCRDMAWrite, QPN: a.qp.QPN()}}, poll(t, a.scq))
		assert.Equal(t, []byte("written"), b.mem.Bytes()[1000:1007])
	})
	t.Run("finite", func(t *testing.T) {
		o := defaultOpts()
		o.rnrRetry = 3
		a, _ := newLink(t, o)
		require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Inline: []byte("cdc")}))
		assert.Equal(t, []verbs.WC{{ID: 1, Status: verbs.StatusRNRRetryExcErr, Opcode: verbs.WCSend, QPN: a.qp.QPN()}}, poll(t, a.scq))
		s, err := a.qp.State()
		require.NoError(t, err)
		assert.Equal(t, verbs.QPErr, s)
	})
}

func TestSendQueueFull(t *testing.T) {
	o := defaultOpts()
	o.cap.MaxSendWR = 2
	a, b := newLink(t, o)
	for i := range 2 {
		require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, Inline: []byte("x")}))
	}
	err := a.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Inline: []byte("x")})
	assert.ErrorIs(t, err, syscall.ENOMEM)
	b.postRecv(t, 0, 0, 8)
	b.postRecv(t, 1, 8, 8)
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Inline: []byte("x")}), "unsignaled work frees its slot when done")
}

func TestPostErrors(t *testing.T) {
	o := defaultOpts()
	f := NewFabric()
	a := newEnd(t, f, net.IPv4(10, 0, 0, 1), o)
	b := newEnd(t, f, net.IPv4(10, 0, 0, 2), o)
	send := &verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Inline: []byte("x")}
	assert.ErrorIs(t, a.qp.PostSend(send), syscall.EINVAL, "RESET")
	assert.ErrorIs(t, a.qp.PostRecv(&verbs.RecvWR{ID: 1}), syscall.EINVAL, "RESET")
	assert.ErrorIs(t, a.qp.ReadyToReceive(verbs.RTRAttr{PathMTU: verbs.MTU1024, HopLimit: 1}), syscall.EINVAL, "RESET to RTR")
	assert.ErrorIs(t, a.qp.Init(verbs.InitAttr{Port: 2}), syscall.EINVAL)
	require.NoError(t, a.qp.Init(verbs.InitAttr{Port: 1}))
	assert.ErrorIs(t, a.qp.Init(verbs.InitAttr{Port: 1}), syscall.EINVAL, "INIT to INIT")
	assert.ErrorIs(t, a.qp.ReadyToSend(verbs.RTSAttr{}), syscall.EINVAL, "INIT to RTS")
	assert.ErrorIs(t, a.qp.ReadyToReceive(verbs.RTRAttr{PathMTU: verbs.MTU4096, HopLimit: 1, DestGID: b.h.GID().GID}), syscall.EINVAL, "path MTU above the port's")
	assert.ErrorIs(t, a.qp.ReadyToReceive(verbs.RTRAttr{PathMTU: 9, HopLimit: 1}), syscall.EINVAL)
	assert.ErrorIs(t, a.qp.ReadyToReceive(verbs.RTRAttr{PathMTU: verbs.MTU1024, HopLimit: 0}), syscall.EINVAL, "RoCE needs a hop limit")
	assert.ErrorIs(t, a.qp.ReadyToReceive(verbs.RTRAttr{PathMTU: verbs.MTU1024, HopLimit: 1, SGIDIndex: 9}), syscall.EINVAL)
	require.NoError(t, a.qp.PostRecv(&verbs.RecvWR{ID: 1, SGE: []verbs.SGE{a.sge(0, 8)}}), "INIT takes receives")
	assert.ErrorIs(t, a.qp.PostSend(send), syscall.EINVAL, "INIT")

	connect(t, b, a, o)
	require.NoError(t, a.qp.ReadyToReceive(verbs.RTRAttr{Port: 1, PathMTU: verbs.MTU1024, DestQPN: b.qp.QPN(), DestGID: b.h.GID().GID, SGIDIndex: 1, HopLimit: 1}))
	assert.ErrorIs(t, a.qp.PostSend(send), syscall.EINVAL, "RTR")
	require.NoError(t, a.qp.ReadyToSend(verbs.RTSAttr{RNRRetry: 7}))

	for _, wr := range []*verbs.SendWR{
		{Opcode: 4, Inline: []byte("x")},
		{Opcode: verbs.OpSend, Inline: []byte("x"), SGE: []verbs.SGE{a.sge(0, 1)}},
		{Opcode: verbs.OpSend, Inline: make([]byte, 65)},
		{Opcode: verbs.OpSend, SGE: []verbs.SGE{a.sge(0, 1), a.sge(1, 1), a.sge(2, 1)}},
	} {
		err := a.qp.PostSend(wr)
		assert.ErrorIs(t, err, syscall.EINVAL, "%+v", wr)
		var ve *verbs.Error
		require.ErrorAs(t, err, &ve)
		assert.Equal(t, "ibv_post_send", ve.Op)
	}
	assert.ErrorIs(t, a.qp.PostRecv(&verbs.RecvWR{SGE: []verbs.SGE{a.sge(0, 1), a.sge(1, 1)}}), syscall.EINVAL)
	assert.Equal(t, 64, a.qp.MaxInline())
}

// A queue pair in Err (a device fault, or SetError as smc_ib_modify_qp_error does)
// flushes its receives and every later post; a peer's SEND to it runs out of retries.
func TestQPErrorFlush(t *testing.T) {
	for _, how := range []string{"FailQP", "SetError"} {
		t.Run(how, func(t *testing.T) {
			a, b := newLink(t, defaultOpts())
			for i := range 3 {
				b.postRecv(t, uint64(10+i), 64*i, 64)
			}
			if how == "FailQP" {
				require.NoError(t, b.h.FailQP(b.qp.QPN()))
			} else {
				require.NoError(t, b.qp.SetError())
			}
			wcs := poll(t, b.rcq)
			require.Len(t, wcs, 3)
			for i, wc := range wcs {
				assert.Equal(t, uint64(10+i), wc.ID)
				assert.ErrorIs(t, wc.Err(), verbs.ErrFlushed)
			}
			require.NoError(t, b.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.OpSend, Inline: []byte("x")}))
			b.postRecv(t, 13, 0, 64)
			assert.Equal(t, []verbs.WC{{ID: 4, Status: verbs.StatusWRFlushErr, Opcode: verbs.WCSend, QPN: b.qp.QPN()}}, poll(t, b.scq))
			assert.Equal(t, []verbs.WC{{ID: 13, Status: verbs.StatusWRFlushErr, Opcode: verbs.WCRecv, QPN: b.qp.QPN()}}, poll(t, b.rcq))

			require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 5, Opcode: verbs.OpSend, Inline: []byte("x")}))
			assert.Equal(t, []verbs.WC{{ID: 5, Status: verbs.StatusRetryExcErr, Opcode: verbs.WCSend, QPN: a.qp.QPN()}}, poll(t, a.scq))
		})
	}
	assert.ErrorIs(t, lonelyHost(t).FailQP(0x999), syscall.ENOENT)
}

// lonelyHost is a host with no queue pairs, for the fault calls' unknown-QP error.
func lonelyHost(t *testing.T) *Host {
	h, err := NewFabric().NewHost(HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 9)})
	require.NoError(t, err)
	return h
}

// Work waiting at the peer (a SEND in RNR) when the requester fails is withdrawn and
// flushed; work the peer had waiting here fails at the peer.
func TestQPErrorWithdrawsWaitingWork(t *testing.T) {
	a, b := newLink(t, defaultOpts())
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Inline: []byte("x")}))
	require.NoError(t, a.h.FailQP(a.qp.QPN()))
	assert.Equal(t, []verbs.WC{{ID: 1, Status: verbs.StatusWRFlushErr, Opcode: verbs.WCSend, QPN: a.qp.QPN()}}, poll(t, a.scq))
	b.postRecv(t, 2, 0, 64)
	assert.Empty(t, poll(t, b.rcq), "the withdrawn SEND never lands")

	c, d := newLink(t, defaultOpts())
	require.NoError(t, c.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.OpSend, Inline: []byte("x")}))
	require.NoError(t, d.h.FailQP(d.qp.QPN()))
	assert.Equal(t, []verbs.WC{{ID: 3, Status: verbs.StatusRetryExcErr, Opcode: verbs.WCSend, QPN: c.qp.QPN()}}, poll(t, c.scq))
}

func TestDropCompletions(t *testing.T) {
	a, b := newLink(t, defaultOpts())
	b.postRecv(t, 1, 0, 8)
	b.postRecv(t, 2, 8, 8)
	require.NoError(t, a.h.DropCompletions(a.qp.QPN(), 1))
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 10, Opcode: verbs.OpSend, Flags: verbs.FlagSignaled, Inline: []byte("one")}))
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 11, Opcode: verbs.OpSend, Flags: verbs.FlagSignaled, Inline: []byte("two")}))
	assert.Equal(t, []verbs.WC{{ID: 11, Opcode: verbs.WCSend, QPN: a.qp.QPN()}}, poll(t, a.scq), "the first completion is lost")
	wcs := poll(t, b.rcq)
	require.Len(t, wcs, 2, "the work itself was done")
	assert.Equal(t, []byte("one\x00\x00\x00\x00\x00two"), b.mem.Bytes()[:11])
	assert.ErrorIs(t, a.h.DropCompletions(0x999, 1), syscall.ENOENT)
}

func TestDelayCompletions(t *testing.T) {
	a, b := newLink(t, defaultOpts())
	require.NoError(t, b.h.DelayCompletions(b.qp.QPN()))
	require.NoError(t, b.rcq.ReqNotify(false))
	for i := range 3 {
		b.postRecv(t, uint64(i), 8*i, 8)
		require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, Inline: []byte{byte('a' + i)}}))
	}
	assert.Empty(t, poll(t, b.rcq))
	assert.Equal(t, []byte{'a', 0, 0, 0, 0, 0, 0, 0, 'b', 0, 0, 0, 0, 0, 0, 0, 'c'}, b.mem.Bytes()[:17], "the data landed")
	n, err := b.h.ReleaseCompletions(b.qp.QPN())
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	require.NoError(t, b.ch.Wait(), "the release raises the armed CQ's event")
	wcs := poll(t, b.rcq)
	require.Len(t, wcs, 3)
	for i, wc := range wcs {
		assert.Equal(t, verbs.WC{ID: uint64(i), Opcode: verbs.WCRecv, ByteLen: 1, QPN: b.qp.QPN()}, wc, "in order")
	}
	_, err = b.h.ReleaseCompletions(0x999)
	assert.ErrorIs(t, err, syscall.ENOENT)
	assert.ErrorIs(t, b.h.DelayCompletions(0x999), syscall.ENOENT)
}

// A peer that dies: the survivor's next work request runs out of retries, its queue
// pair goes to Err and its receives flush; the dead host's objects answer ENODEV and
// still close.
func TestPeerDeath(t *testing.T) {
	a, b := newLink(t, defaultOpts())
	a.postRecv(t, 20, 0, 64)
	require.NoError(t, b.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Inline: []byte("x")}))
	assert.Len(t, poll(t, a.rcq), 1)
	require.NoError(t, b.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Inline: []byte("waiting")}), "no receive at a: waits")
	a.postRecv(t, 21, 64, 64)
	a.postRecv(t, 22, 128, 64)
	assert.Len(t, poll(t, a.rcq), 1)

	b.h.Kill()
	names, err := b.h.Devices()
	require.NoError(t, err)
	assert.Empty(t, names)
	_, err = b.h.Open("rxe0")
	assert.ErrorIs(t, err, verbs.ErrNoDevice)
	assert.ErrorIs(t, b.qp.PostSend(&verbs.SendWR{Opcode: verbs.OpSend}), syscall.ENODEV)
	_, err = b.dev.AllocPD()
	assert.ErrorIs(t, err, syscall.ENODEV)

	s, err := a.qp.State()
	require.NoError(t, err)
	assert.Equal(t, verbs.QPRTS, s, "RC notices a dead peer only when it sends")
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.OpRDMAWrite, SGE: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	assert.Equal(t, []verbs.WC{{ID: 3, Status: verbs.StatusRetryExcErr, Opcode: verbs.WCRDMAWrite, QPN: a.qp.QPN()}}, poll(t, a.scq))
	assert.Equal(t, []verbs.WC{{ID: 22, Status: verbs.StatusWRFlushErr, Opcode: verbs.WCRecv, QPN: a.qp.QPN()}}, poll(t, a.rcq))
	s, err = a.qp.State()
	require.NoError(t, err)
	assert.Equal(t, verbs.QPErr, s)
}

func TestDestroyedPeerQP(t *testing.T) {
	a, b := newLink(t, defaultOpts())
	require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Inline: []byte("x")}))
	b.close(t)
	assert.Equal(t, []verbs.WC{{ID: 1, Status: verbs.StatusRetryExcErr, Opcode: verbs.WCSend, QPN: a.qp.QPN()}}, poll(t, a.scq))
	// b's cleanup closes again: every Close is idempotent.
}

func TestCloseOrder(t *testing.T) {
	a, _ := newLink(t, defaultOpts())
	assert.ErrorIs(t, a.pd.Close(), syscall.EBUSY)
	assert.ErrorIs(t, a.scq.Close(), syscall.EBUSY)
	assert.ErrorIs(t, a.ch.Close(), syscall.EBUSY)
	assert.ErrorIs(t, a.dev.Close(), syscall.EBUSY)
	assert.Equal(t, Counts{Devices: 1, PDs: 1, MRs: 1, Channels: 1, CQs: 2, QPs: 1}, a.h.Live())
	assert.Equal(t, verbs.Counts{PDs: 1, MRs: 1, Channels: 1, CQs: 2, QPs: 1}, a.dev.Live())
}

func TestCQOverflow(t *testing.T) {
	o := defaultOpts()
	o.cqe = 2
	a, b := newLink(t, o)
	for i := range 3 {
		b.postRecv(t, uint64(i), 0, 8)
		require.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, Inline: []byte("x")}))
	}
	_, err := b.rcq.Poll(make([]verbs.WC, 4))
	assert.ErrorIs(t, err, syscall.EOVERFLOW)
}

func TestCompChannelWait(t *testing.T) {
	a, _ := newLink(t, defaultOpts())
	require.NoError(t, a.ch.SetDeadline(time.Now().Add(-time.Second)))
	assert.ErrorIs(t, a.ch.Wait(), os.ErrDeadlineExceeded)
	require.NoError(t, a.ch.SetDeadline(time.Time{}))

	// Close ends a Wait, whether it comes before or during it.
	f := NewFabric()
	h, err := f.NewHost(HostConfig{Device: "rxe0", IP: net.IPv4(10, 0, 0, 1)})
	require.NoError(t, err)
	dev, err := h.Open("rxe0")
	require.NoError(t, err)
	ch, err := dev.CreateCompChannel()
	require.NoError(t, err)
	done := make(chan error)
	go func() { done <- ch.Wait() }()
	require.NoError(t, ch.Close())
	assert.ErrorIs(t, <-done, os.ErrClosed)
	assert.ErrorIs(t, ch.SetDeadline(time.Time{}), os.ErrClosed)
	_, err = dev.CreateCQ(4, ch)
	assert.ErrorIs(t, err, syscall.EINVAL)
	require.NoError(t, dev.Close())
	assert.Equal(t, Counts{}, h.Live())
}

// Both sides stream numbered SENDs at each other from several goroutines, reposting
// receives from a goroutine that waits on the completion channel: the race detector
// watches the fabric's locking, and every message arrives once, in order.
func TestConcurrentTraffic(t *testing.T) {
	const msgs = 500
	o := defaultOpts()
	o.cap.MaxSendWR = msgs
	o.cqe = 2 * msgs
	a, b := newLink(t, o)
	var wg sync.WaitGroup
	for _, pair := range [][2]*end{{a, b}, {b, a}} {
		tx, rx := pair[0], pair[1]
		for i := range 16 {
			rx.postRecv(t, uint64(i), 8*i, 8)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			var m [8]byte
			for i := range msgs {
				binary.LittleEndian.PutUint64(m[:], uint64(i))
				if !assert.NoError(t, tx.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, Flags: verbs.FlagSolicited, Inline: m[:]})) {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			next := uint64(0)
			buf := make([]verbs.WC, 8)
			for next < msgs {
				if !assert.NoError(t, rx.rcq.ReqNotify(true)) {
					return
				}
				n, err := rx.rcq.Poll(buf)
				if !assert.NoError(t, err) {
					return
				}
				if n == 0 {
					if !assert.NoError(t, rx.ch.Wait()) {
						return
					}
					continue
				}
				for _, wc := range buf[:n] {
					if !assert.NoError(t, wc.Err()) {
						return
					}
					slot := int(wc.ID)
					got := binary.LittleEndian.Uint64(rx.mem.Bytes()[8*slot:])
					if !assert.Equal(t, next, got) {
						return
					}
					next++
					rx.postRecv(t, wc.ID, 8*slot, 8)
				}
			}
		}()
	}
	wg.Wait()
}

func TestMemRegionBounds(t *testing.T) {
	a, _ := newLink(t, defaultOpts())
	m := a.mr.(*memRegion)
	_, ok := m.sliceLocked(m.addr, uint32(m.n))
	assert.True(t, ok)
	_, ok = m.sliceLocked(m.addr+uint64(m.n), 0)
	assert.True(t, ok, "an empty range at the end")
	_, ok = m.sliceLocked(m.addr+uint64(m.n), 1)
	assert.False(t, ok)
	_, ok = m.sliceLocked(m.addr-1, 1)
	assert.False(t, ok)
	_, ok = m.sliceLocked(^uint64(0), 2)
	assert.False(t, ok, "no wrap-around")
	_, err := a.pd.RegMR(a.mem, verbs.AccessRemoteWrite)
	assert.ErrorIs(t, err, syscall.EINVAL, "remote write needs local write")
	assert.True(t, errors.Is(err, syscall.EINVAL))
}
