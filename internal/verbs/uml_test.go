package verbs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/smcloop/smcloop/test/uml/umltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The real binding on soft-RoCE: TestVerbsInUML re-runs itself, built with the rdma tag,
// in two User-Mode Linux instances of test/uml/run.sh (10.0.0.1 the server, 10.0.0.2
// the client, rxe0 on each). The client RDMA WRITEs 1 MiB into the server's region and
// SENDs a 44-byte message inline; both sides compare SHA-256 sums. Then the error path:
// the server moves its queue pair to Err (its receive flushes) and the client's next
// SEND runs out of transport retries.
//
// On the host it runs through umltest.Run, which skips it when no UML kernel is built
// (make uml-kernel).

const (
	umlWriteSize = 1 << 20
	umlMsgSize   = 44 // an SMC-R CDC message (struct smc_cdc_msg)
	umlPort      = 18515
)

// umlLinkInfo is what the two sides exchange over TCP before the queue pairs connect,
// as SMC-R's CLC Accept and Confirm carry it (GID, QPN, PSN, rkey, RMB address).
type umlLinkInfo struct {
	GID  GID
	QPN  uint32
	PSN  uint32
	QPN2 uint32 // the second queue pair's, for the bad-rkey case
	PSN2 uint32
	RKey uint32
	Addr uint64
	Sum  [32]byte // the client's: SHA-256 of what it writes
}

func TestVerbsInUML(t *testing.T) {
	if umltest.Enabled() {
		umlInside(t)
		return
	}
	umltest.Run(t, umltest.Config{Instances: 2, Tags: []string{"rdma"}, Timeout: 240 * time.Second})
}

// umlSide is one instance's link: every object SMC-R's link setup makes.
type umlSide struct {
	dev      Device
	port     PortAttr
	gid      GIDEntry
	pd       PD
	ch       CompChannel
	scq, rcq CQ
	qp, qp2  QP
	mem      *Mem
	mr       MR
}

func umlOpen(t *testing.T) *umlSide {
	require.True(t, Available(), "the test binary was built without the rdma tag")
	names, err := System().Devices()
	require.NoError(t, err)
	require.Contains(t, names, "rxe0")
	s := &umlSide{}
	s.dev, err = System().Open("rxe0")
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.Equal(t, Counts{}, s.dev.Live(), "everything made from the device was released")
		assert.NoError(t, s.dev.Close())
	})
	s.port, err = s.dev.QueryPort(1)
	require.NoError(t, err)
	var ok bool
	s.gid, ok = s.port.GID(GIDTypeRoCEv2)
	require.True(t, ok, "rxe offers RoCE v2 GIDs: %+v", s.port.GIDs)
	// The IPv4 GID, not the link-local one: the route between the instances.
	for _, g := range s.port.GIDs {
		if g.Type == GIDTypeRoCEv2 && g.GID.IP().To4() != nil {
			s.gid = g
		}
	}
	t.Logf("rxe0 port 1: %v, MTU %d (max %d), GID %v index %d, MAC %v", s.port.State, s.port.ActiveMTU.Bytes(), s.port.MaxMTU.Bytes(), s.gid.GID, s.gid.Index, s.gid.MAC)
	assert.Equal(t, PortActive, s.port.State)
	assert.Len(t, s.gid.MAC, 6)
	s.pd, err = s.dev.AllocPD()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.pd.Close()) })
	s.ch, err = s.dev.CreateCompChannel()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.ch.Close()) })
	s.scq, err = s.dev.CreateCQ(16, s.ch)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.scq.Close()) })
	s.rcq, err = s.dev.CreateCQ(16, s.ch)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.rcq.Close()) })
	s.qp, err = s.pd.CreateQP(QPConfig{SendCQ: s.scq, RecvCQ: s.rcq, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: umlMsgSize}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.qp.Close()) })
	require.GreaterOrEqual(t, s.qp.MaxInline(), umlMsgSize)
	s.qp2, err = s.pd.CreateQP(QPConfig{SendCQ: s.scq, RecvCQ: s.rcq, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.qp2.Close()) })
	s.mem, err = NewMem(umlWriteSize + 4096)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.mem.Close()) })
	s.mr, err = s.pd.RegMR(s.mem, AccessLocalWrite|AccessRemoteWrite)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.mr.Close()) })
	assert.Equal(t, s.mem.Addr(), s.mr.Addr())
	assert.Equal(t, s.mem.Len(), s.mr.Len())
	return s
}

// connect walks the queue pair to RTS towards the peer (smc_ib_ready_link), with a short
// transport timeout (2^14 × 4.096 µs, about 67 ms, 3 retries), so the error case ends
// fast.
func (s *umlSide) connect(t *testing.T, mine, peer umlLinkInfo) {
	for _, c := range []struct {
		qp                    QP
		psn, peerQPN, peerPSN uint32
	}{{s.qp, mine.PSN, peer.QPN, peer.PSN}, {s.qp2, mine.PSN2, peer.QPN2, peer.PSN2}} {
		require.NoError(t, c.qp.Init(InitAttr{Port: 1, Access: AccessLocalWrite | AccessRemoteWrite}))
		st, err := c.qp.State()
		require.NoError(t, err)
		assert.Equal(t, QPInit, st)
		require.NoError(t, c.qp.ReadyToReceive(RTRAttr{Port: 1, PathMTU: min(s.port.ActiveMTU, MTU1024), DestQPN: c.peerQPN, RQPSN: c.peerPSN,
			DestGID: peer.GID, SGIDIndex: uint8(s.gid.Index), HopLimit: 1}))
		require.NoError(t, c.qp.ReadyToSend(RTSAttr{SQPSN: c.psn, Timeout: 14, RetryCnt: 3, RNRRetry: RNRRetryInfinite, MaxRdAtomic: 1}))
		st, err = c.qp.State()
		require.NoError(t, err)
		assert.Equal(t, QPRTS, st)
	}
}

// next waits for the next completion of cq (arming, polling, then waiting on the
// channel), up to 30 s.
func (s *umlSide) next(t *testing.T, cq CQ) WC {
	require.NoError(t, s.ch.SetDeadline(time.Now().Add(30*time.Second)))
	wc := make([]WC, 1)
	for {
		require.NoError(t, cq.ReqNotify(false))
		n, err := cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			return wc[0]
		}
		require.NoError(t, s.ch.Wait())
	}
}

func umlInside(t *testing.T) {
	env, err := umltest.Current()
	require.NoError(t, err)
	require.Equal(t, 2, env.Instances, "two instances")
	role := env.Role
	begin := time.Now()
	s := umlOpen(t)
	mine := umlLinkInfo{GID: s.gid.GID, QPN: s.qp.QPN(), PSN: rand.Uint32() & PSNMask, QPN2: s.qp2.QPN(), PSN2: rand.Uint32() & PSNMask,
		RKey: s.mr.RKey(), Addr: s.mr.Addr()}

	var c net.Conn
	if role == umltest.RoleServer {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", umlPort))
		require.NoError(t, err)
		c, err = ln.Accept()
		require.NoError(t, err)
		require.NoError(t, ln.Close())
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c, err = env.DialPeer(ctx, umlPort)
		require.NoError(t, err)
	}
	defer c.Close()
	dec, enc := json.NewDecoder(c), json.NewEncoder(c)
	msg := bytes.Repeat([]byte{0xfe, 0x2c}, umlMsgSize/2)

	if role == "server" {
		var peer umlLinkInfo
		require.NoError(t, dec.Decode(&peer))
		require.NoError(t, enc.Encode(mine))
		s.connect(t, mine, peer)
		// The receive for the CDC-sized SEND goes in before the peer hears "ready".
		recvAt := s.mr.Addr() + umlWriteSize
		require.NoError(t, s.qp.PostRecv(&RecvWR{ID: 100, SGE: []SGE{{Addr: recvAt, Length: 64, LKey: s.mr.LKey()}}}))
		require.NoError(t, s.qp2.PostRecv(&RecvWR{ID: 200, SGE: []SGE{{Addr: recvAt + 64, Length: 64, LKey: s.mr.LKey()}}}))
		require.NoError(t, enc.Encode(umlLinkInfo{})) // ready
		setup := time.Since(begin)

		start := time.Now()
		wc := s.next(t, s.rcq)
		require.NoError(t, wc.Err())
		assert.Equal(t, WC{ID: 100, Opcode: WCRecv, ByteLen: umlMsgSize, QPN: s.qp.QPN()}, wc)
		var sums umlLinkInfo
		require.NoError(t, dec.Decode(&sums))
		b := s.mem.Bytes()
		assert.Equal(t, msg, b[umlWriteSize:umlWriteSize+umlMsgSize], "the SEND's bytes")
		assert.Equal(t, sums.Sum, sha256.Sum256(b[:umlWriteSize]), "SHA-256 of the 1 MiB RDMA WRITE")
		t.Logf("server: setup %v; the WRITE and SEND seen %v after the queue pairs were up", setup.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

		// The error path: a receive posted, then the queue pair to Err.
		require.NoError(t, s.qp.PostRecv(&RecvWR{ID: 101, SGE: []SGE{{Addr: recvAt, Length: 64, LKey: s.mr.LKey()}}}))
		require.NoError(t, s.qp.SetError())
		st, err := s.qp.State()
		require.NoError(t, err)
		assert.Equal(t, QPErr, st)
		wc = s.next(t, s.rcq)
		assert.Equal(t, uint64(101), wc.ID)
		assert.ErrorIs(t, wc.Err(), ErrFlushed)
		require.NoError(t, enc.Encode(umlLinkInfo{})) // in Err now
		require.NoError(t, dec.Decode(&sums))         // the client saw its SEND fail

		// A WRITE with a bad rkey to the second queue pair: the responder goes to Err
		// too (rxe's do_class_ac_error), flushing its receive.
		require.NoError(t, dec.Decode(&sums))
		wc = s.next(t, s.rcq)
		assert.Equal(t, uint64(200), wc.ID)
		assert.ErrorIs(t, wc.Err(), ErrFlushed)
		st, err = s.qp2.State()
		require.NoError(t, err)
		assert.Equal(t, QPErr, st, "a remote access violation moves the responder to Err")
	} else {
		require.NoError(t, enc.Encode(mine))
		var peer umlLinkInfo
		require.NoError(t, dec.Decode(&peer))
		s.connect(t, mine, peer)
		var ready umlLinkInfo
		require.NoError(t, dec.Decode(&ready))
		setup := time.Since(begin)

		b := s.mem.Bytes()
		rand.NewChaCha8([32]byte{7}).Read(b[:umlWriteSize])
		sum := sha256.Sum256(b[:umlWriteSize])
		start := time.Now()
		half := uint32(umlWriteSize / 2)
		require.NoError(t, s.qp.PostSend(&SendWR{ID: 1, Opcode: OpRDMAWrite, Flags: FlagSignaled,
			SGE:        []SGE{{Addr: s.mr.Addr(), Length: half, LKey: s.mr.LKey()}, {Addr: s.mr.Addr() + uint64(half), Length: half, LKey: s.mr.LKey()}},
			RemoteAddr: peer.Addr, RKey: peer.RKey}))
		require.NoError(t, s.qp.PostSend(&SendWR{ID: 2, Opcode: OpSend, Flags: FlagSignaled | FlagSolicited, Inline: msg}))
		for _, want := range []WC{{ID: 1, Opcode: WCRDMAWrite, QPN: s.qp.QPN()}, {ID: 2, Opcode: WCSend, QPN: s.qp.QPN()}} {
			wc := s.next(t, s.scq)
			require.NoError(t, wc.Err())
			wc.ByteLen = 0 // defined for receives only (rxe fills it in for sends too)
			assert.Equal(t, want, wc)
		}
		t.Logf("client: setup %v; 1 MiB RDMA WRITE and 44-byte SEND completed in %v", setup.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		require.NoError(t, enc.Encode(umlLinkInfo{Sum: sum}))

		var inErr umlLinkInfo
		require.NoError(t, dec.Decode(&inErr))
		start = time.Now()
		require.NoError(t, s.qp.PostSend(&SendWR{ID: 3, Opcode: OpSend, Flags: FlagSignaled, Inline: msg}))
		wc := s.next(t, s.scq)
		assert.Equal(t, uint64(3), wc.ID)
		assert.Equal(t, StatusRetryExcErr, wc.Status, "a SEND to a queue pair in Err runs out of retries")
		var ce *CompletionError
		assert.True(t, errors.As(wc.Err(), &ce))
		st, err := s.qp.State()
		require.NoError(t, err)
		assert.Equal(t, QPErr, st)
		t.Logf("client: the SEND to the failed queue pair completed with %q after %v", wc.Status, time.Since(start).Round(time.Millisecond))
		require.NoError(t, enc.Encode(umlLinkInfo{}))

		start = time.Now()
		require.NoError(t, s.qp2.PostSend(&SendWR{ID: 4, Opcode: OpRDMAWrite, Flags: FlagSignaled,
			SGE: []SGE{{Addr: s.mr.Addr(), Length: 16, LKey: s.mr.LKey()}}, RemoteAddr: peer.Addr, RKey: peer.RKey ^ 0xffff0000}))
		wc = s.next(t, s.scq)
		assert.Equal(t, uint64(4), wc.ID)
		assert.Equal(t, StatusRemAccessErr, wc.Status, "a WRITE with a bad rkey")
		st, err = s.qp2.State()
		require.NoError(t, err)
		assert.Equal(t, QPErr, st)
		t.Logf("client: the WRITE with a bad rkey completed with %q after %v", wc.Status, time.Since(start).Round(time.Millisecond))
		require.NoError(t, enc.Encode(umlLinkInfo{}))
	}
}
