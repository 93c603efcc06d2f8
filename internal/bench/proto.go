package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ErrProtocol is matched (errors.Is) by errors about malformed headers and reports, or a
// peer that breaks the benchmark protocol.
var ErrProtocol = errors.New("bench protocol violation")

// mode is what a connection measures.
type mode uint8

const (
	modePingPong mode = 1
	modeStream   mode = 2
)

func (m mode) String() string {
	switch m {
	case modePingPong:
		return "ping-pong"
	case modeStream:
		return "stream"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// The header opens every connection, client to server (big-endian):
//
//	0  4  magic "SMLB"
//	4  1  version (2)
//	5  1  mode (1 ping-pong, 2 stream)
//	6  2  zero
//	8  4  message size in bytes, 1..MaxSize
//	12 4  zero
//	16 8  warm-up in nanoseconds: the receiver's measurement (stream) and the server's
//	      CPU interval (both modes) start this long after it sent the ready message
const (
	headerMagic   = 0x534d4c42 // "SMLB"
	headerVersion = 2
	headerLen     = 24
)

type header struct {
	mode   mode
	size   int
	warmup time.Duration
}

func (h header) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, headerMagic)
	b = append(b, headerVersion, byte(h.mode), 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(h.size))
	b = binary.BigEndian.AppendUint32(b, 0)
	return binary.BigEndian.AppendUint64(b, uint64(h.warmup))
}

func parseHeader(b []byte) (header, error) {
	if len(b) != headerLen {
		return header{}, fmt.Errorf("%w: header is %d bytes, want %d", ErrProtocol, len(b), headerLen)
	}
	if m := binary.BigEndian.Uint32(b); m != headerMagic {
		return header{}, fmt.Errorf("%w: header magic %#08x, want %#08x", ErrProtocol, m, headerMagic)
	}
	if b[4] != headerVersion {
		return header{}, fmt.Errorf("%w: header version %d, want %d", ErrProtocol, b[4], headerVersion)
	}
	h := header{
		mode:   mode(b[5]),
		size:   int(binary.BigEndian.Uint32(b[8:])),
		warmup: time.Duration(binary.BigEndian.Uint64(b[16:])),
	}
	if h.mode != modePingPong && h.mode != modeStream {
		return header{}, fmt.Errorf("%w: header mode %d, want 1 or 2", ErrProtocol, b[5])
	}
	if h.size < 1 || h.size > MaxSize {
		return header{}, fmt.Errorf("%w: header size %d, want 1..%d", ErrProtocol, h.size, MaxSize)
	}
	if h.warmup < 0 {
		return header{}, fmt.Errorf("%w: header warm-up %d ns is negative", ErrProtocol, int64(h.warmup))
	}
	return h, nil
}

// The ready message answers the header, server to client, once the server has prepared
// its pattern (big-endian):
//
//	0  4  magic "SMLK"
//	4  1  version (2, the header's)
//	5  3  zero
//
// The client starts its clock and sends the first message only after it, so that the
// server's set-up does not eat into the warm-up.
const (
	readyMagic = 0x534d4c4b // "SMLK"
	readyLen   = 8
)

func appendReady(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, readyMagic)
	return append(b, headerVersion, 0, 0, 0)
}

func parseReady(b []byte) error {
	if len(b) != readyLen {
		return fmt.Errorf("%w: ready message is %d bytes, want %d", ErrProtocol, len(b), readyLen)
	}
	if m := binary.BigEndian.Uint32(b); m != readyMagic {
		return fmt.Errorf("%w: ready magic %#08x, want %#08x", ErrProtocol, m, readyMagic)
	}
	if b[4] != headerVersion {
		return fmt.Errorf("%w: ready version %d, want %d", ErrProtocol, b[4], headerVersion)
	}
	return nil
}

// The report closes every connection, server to client, after the end marker (big-endian):
//
//	0  4  magic "SMLR"
//	4  1  version (2)
//	5  3  zero
//	8  8  data messages received and verified (the end marker not counted)
//	16 8  data bytes received and verified
//	24 8  stream: bytes received inside the measurement window; ping-pong: 0
//	32 8  stream: length of the measurement window in nanoseconds; ping-pong: 0
//	40 8  the server process's user CPU time over its CPU interval, nanoseconds
//	48 8  its system CPU time over that interval, nanoseconds
//	56 8  the length of that interval (wall time), nanoseconds
//	64 8  the operations the server did in it: round trips echoed, or messages received
//
// The server's CPU interval starts once the warm-up is over (ping-pong: at the first
// message after warm-up nanoseconds from the ready message; stream: with the
// measurement window) and ends with the end marker.
const (
	reportMagic   = 0x534d4c52 // "SMLR"
	reportVersion = 2
	reportLen     = 72
)

type report struct {
	messages    uint64
	bytes       uint64
	windowBytes uint64
	window      time.Duration
	cpu         cpuSpan
}

func (r report) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, reportMagic)
	b = append(b, reportVersion, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, r.messages)
	b = binary.BigEndian.AppendUint64(b, r.bytes)
	b = binary.BigEndian.AppendUint64(b, r.windowBytes)
	b = binary.BigEndian.AppendUint64(b, uint64(r.window))
	b = binary.BigEndian.AppendUint64(b, uint64(r.cpu.user))
	b = binary.BigEndian.AppendUint64(b, uint64(r.cpu.sys))
	b = binary.BigEndian.AppendUint64(b, uint64(r.cpu.wall))
	return binary.BigEndian.AppendUint64(b, r.cpu.ops)
}

func parseReport(b []byte) (report, error) {
	if len(b) != reportLen {
		return report{}, fmt.Errorf("%w: report is %d bytes, want %d", ErrProtocol, len(b), reportLen)
	}
	if m := binary.BigEndian.Uint32(b); m != reportMagic {
		return report{}, fmt.Errorf("%w: report magic %#08x, want %#08x", ErrProtocol, m, reportMagic)
	}
	if b[4] != reportVersion {
		return report{}, fmt.Errorf("%w: report version %d, want %d", ErrProtocol, b[4], reportVersion)
	}
	r := report{
		messages:    binary.BigEndian.Uint64(b[8:]),
		bytes:       binary.BigEndian.Uint64(b[16:]),
		windowBytes: binary.BigEndian.Uint64(b[24:]),
		window:      time.Duration(binary.BigEndian.Uint64(b[32:])),
		cpu: cpuSpan{
			user: time.Duration(binary.BigEndian.Uint64(b[40:])),
			sys:  time.Duration(binary.BigEndian.Uint64(b[48:])),
			wall: time.Duration(binary.BigEndian.Uint64(b[56:])),
			ops:  binary.BigEndian.Uint64(b[64:]),
		},
	}
	if r.windowBytes > r.bytes || r.window < 0 {
		return report{}, fmt.Errorf("%w: report window %d bytes in %d ns of %d bytes", ErrProtocol,
			r.windowBytes, int64(r.window), r.bytes)
	}
	if r.cpu.user < 0 || r.cpu.sys < 0 || r.cpu.wall < 0 || r.cpu.ops > r.messages {
		return report{}, fmt.Errorf("%w: report CPU interval %d+%d ns in %d ns for %d of %d messages", ErrProtocol,
			int64(r.cpu.user), int64(r.cpu.sys), int64(r.cpu.wall), r.cpu.ops, r.messages)
	}
	return r, nil
}
