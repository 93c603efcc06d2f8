package verbstest

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/verbs"
)

// FuzzFabric drives a link with an arbitrary sequence of work requests (keys, addresses
// and lengths from the input, valid or not) and faults. Whatever the sequence: nothing
// panics, every failed call is a *verbs.Error, every completion has a known status and
// belongs to one of the link's queue pairs, and closing releases everything.
func FuzzFabric(f *testing.F) {
	f.Add([]byte{2, 0, 0, 0, 8, 1, 4, 0, 0, 0, 0, 0, 3})
	f.Add([]byte{0, 1, 0, 0, 0, 16, 0, 0, 3, 4, 1, 3})
	f.Add([]byte{6, 1, 1, 8, 2, 0, 0, 0, 8, 6, 0, 3, 8, 0, 0, 0, 0, 0, 0, 0, 3})
	f.Fuzz(func(t *testing.T, in []byte) {
		o := defaultOpts()
		o.memSize = 4096
		o.cap.MaxSendWR, o.cap.MaxRecvWR, o.cqe = 4, 4, 8
		a, b := newLink(t, o)
		ends := [2]*end{a, b}
		next := func() byte {
			if len(in) == 0 {
				return 0
			}
			c := in[0]
			in = in[1:]
			return c
		}
		u16 := func() uint32 { return uint32(binary.LittleEndian.Uint16([]byte{next(), next()})) }
		checkErr := func(err error) {
			var ve *verbs.Error
			if err != nil {
				assert.True(t, errors.As(err, &ve), "%v is a *verbs.Error", err)
			}
		}
		wcs := make([]verbs.WC, 8)
		for len(in) > 0 {
			op := next()
			e := ends[op>>7]
			peer := ends[1-op>>7]
			switch op & 0x7f % 10 {
			case 0: // RDMA WRITE, possibly with a bad key or range
				rkey := peer.mr.RKey() + uint32(next()%3) - 1
				checkErr(e.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.FlagSignaled,
					SGE: []verbs.SGE{e.sge(int(u16()%4096), int(u16()%5000))}, RemoteAddr: peer.mr.Addr() + uint64(u16()), RKey: rkey}))
			case 1: // inline SEND, possibly too long
				checkErr(e.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Flags: verbs.SendFlags(next()) & (verbs.FlagSignaled | verbs.FlagSolicited), Inline: make([]byte, next()%80)}))
			case 2: // RECV
				checkErr(e.qp.PostRecv(&verbs.RecvWR{ID: 3, SGE: []verbs.SGE{e.sge(int(u16()%4096), int(next()))}}))
			case 3: // poll both CQs
				for _, cq := range []verbs.CQ{e.scq, e.rcq} {
					n, err := cq.Poll(wcs)
					checkErr(err)
					for _, wc := range wcs[:n] {
						assert.Less(t, wc.Status, verbs.StatusTMErr)
						assert.Contains(t, []uint32{a.qp.QPN(), b.qp.QPN()}, wc.QPN)
					}
				}
			case 4:
				checkErr(e.h.FailQP(e.qp.QPN()))
			case 5:
				checkErr(e.h.DropCompletions(e.qp.QPN(), int(next()%3)))
			case 6:
				if next()%2 == 0 {
					checkErr(e.h.DelayCompletions(e.qp.QPN()))
				} else {
					_, err := e.h.ReleaseCompletions(e.qp.QPN())
					checkErr(err)
				}
			case 7:
				checkErr(e.qp.SetError())
			case 8:
				e.h.Kill()
			case 9: // SEND from registered memory, possibly a bad key
				checkErr(e.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.OpSend,
					SGE: []verbs.SGE{{Addr: e.mr.Addr() + uint64(u16()), Length: u16() % 128, LKey: e.mr.LKey() + uint32(next()%2)}}}))
			}
			for _, x := range ends {
				_, err := x.qp.State()
				checkErr(err)
				q := x.qp.(*queuePair)
				x.h.fab.mu.Lock()
				used, vanished := q.sqUsed, q.vanished
				x.h.fab.mu.Unlock()
				if !vanished {
					assert.True(t, used >= 0 && used <= o.cap.MaxSendWR, "send queue use %d of %d", used, o.cap.MaxSendWR)
				}
			}
		}
		for _, x := range ends {
			require.NoError(t, x.qp.Close())
		}
	})
}
