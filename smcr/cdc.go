// Package smcr is the SMC-R backend: a connection's bytes move by RDMA WRITE into the
// peer's RMB over an RC queue pair, and its cursors by the 44-byte SMC-R CDC message
// (struct smc_cdc_msg) sent as an IB SEND on the same queue pair.
//
// It is built over the verbs interfaces of internal/verbs only, so it runs on the
// in-memory fabric of package verbstest as on libibverbs. A [Device] is an open RDMA
// device with its chosen port and GID; a [LinkGroup] is the link group with one peer (one
// RC link, one completion channel with a send and a receive CQ, and one goroutine that
// polls them, demultiplexes what arrives and runs the LLC state machines and the
// TEST_LINK keepalive); a [Conn] is one connection's datapath.Backend over a pooled
// [RMB] and a send buffer. The wire formats are here too: the CDC message (cdc.go) and
// the LLC messages (llc.go). docs/SMC-R.md describes the whole.
package smcr

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/smcloop/smcloop/cdc"
)

// CDC message layout (SMC-REFERENCE §3.2; net/smc/smc_cdc.h struct smc_cdc_msg), all
// multi-byte fields big-endian:
//
//	off size field
//	  0    1 type 0xFE
//	  1    1 length = 44
//	  2    2 sequence number
//	  4    4 alert token of the peer connection
//	  8    8 producer cursor: 2 reserved, wrap u16, count u32
//	 16    8 consumer cursor, same format
//	 24    1 producer flags
//	 25    1 connection-state flags
//	 26   18 reserved
const (
	CDCLen     = 44 // SMC_WR_TX_SIZE
	WRBufSize  = 48 // SMC_WR_BUF_SIZE: the work-request buffer a CDC travels in
	cdcMsgType = 0xFE
)

// ErrMalformed is matched by every decoding error.
var ErrMalformed = errors.New("smcr: malformed CDC message")

// CDC is a decoded SMC-R CDC message.
type CDC struct {
	Seq       uint16
	Token     uint32 // the receiving connection's alert token
	Prod      cdc.Cursor
	Cons      cdc.Cursor
	ProdFlags cdc.ProdFlags
	ConnFlags cdc.ConnFlags
}

// Append encodes m onto b.
func (m *CDC) Append(b []byte) []byte {
	var w [CDCLen]byte
	w[0] = cdcMsgType
	w[1] = CDCLen
	binary.BigEndian.PutUint16(w[2:], m.Seq)
	binary.BigEndian.PutUint32(w[4:], m.Token)
	putCursor(w[8:16], m.Prod)
	putCursor(w[16:24], m.Cons)
	w[24] = byte(m.ProdFlags)
	w[25] = byte(m.ConnFlags)
	return append(b, w[:]...)
}

func putCursor(b []byte, c cdc.Cursor) {
	binary.BigEndian.PutUint16(b[2:], c.Wrap)
	binary.BigEndian.PutUint32(b[4:], c.Count)
}

func cursor(b []byte) cdc.Cursor {
	return cdc.Cursor{Wrap: binary.BigEndian.Uint16(b[2:]), Count: binary.BigEndian.Uint32(b[4:])}
}

// ParseCDC decodes a received CDC message. The kernel requires type 0xFE and length
// exactly 44; a work-request buffer may be longer (48 bytes), the rest is ignored.
func ParseCDC(b []byte) (*CDC, error) {
	if len(b) < CDCLen {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), CDCLen)
	}
	if b[0] != cdcMsgType || b[1] != CDCLen {
		return nil, fmt.Errorf("%w: type %#x length %d, want 0xfe and %d", ErrMalformed, b[0], b[1], CDCLen)
	}
	return &CDC{
		Seq:       binary.BigEndian.Uint16(b[2:]),
		Token:     binary.BigEndian.Uint32(b[4:]),
		Prod:      cursor(b[8:16]),
		Cons:      cursor(b[16:24]),
		ProdFlags: cdc.ProdFlags(b[24]),
		ConnFlags: cdc.ConnFlags(b[25]),
	}, nil
}

// SeqBefore reports whether sequence number a comes before b (signed 16-bit
// difference, as smc_cdc_before): a received CDC whose number is before the last one
// accepted is stale and dropped, unless it carries failover_validation.
func SeqBefore(a, b uint16) bool { return int16(a-b) < 0 }

// Stale reports whether a received CDC must be dropped given the last accepted sequence
// number (smc_cdc_msg_validate without the failover path).
func (m *CDC) Stale(lastSeq uint16) bool {
	return SeqBefore(m.Seq, lastSeq) && m.ProdFlags&cdc.FailoverValidation == 0
}

// CursorOlder reports whether cursor next is older than cur and must be ignored (the
// kernel's smc_cdc_cursor_older rule: an older wrap with a new wrap != 0, or the same wrap
// with a smaller count).
func CursorOlder(cur, next cdc.Cursor) bool {
	if next.Wrap != cur.Wrap {
		return int16(next.Wrap-cur.Wrap) < 0 && next.Wrap != 0
	}
	return next.Count < cur.Count
}
