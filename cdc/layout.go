package cdc

import (
	"encoding/binary"
	"strconv"
	"strings"
)

// Layout of the SMC-D CDC area (struct smcd_cdc_msg, net/smc/smc_cdc.h) at
// offset 0 of every DMB. The ring payload starts at offset AreaSize.
const (
	AreaSize = 32   // sizeof(struct smcd_cdc_msg); ring data starts here
	MsgType  = 0xFE // SMC_CDC_MSG_TYPE, byte 0

	OffType = 0  // 1 byte: MsgType; bytes 1..7 reserved in the kernel, smcloop's wake stamp
	OffProd = 8  // 8-byte producer cursor word (prod)
	OffCons = 16 // 8-byte consumer cursor word (cons) with the flag bytes
	// OffWake is the kernel's reserved res3[8]. smcloop uses it as the DMB
	// owner's doorbell-suppression word (bits WakeReader, WakeWriter).
	OffWake = 24
)

// Byte offsets inside one 8-byte cursor word (union smcd_cdc_cursor, packed).
const (
	wordOffWrap      = 0 // u16, host order
	wordOffCount     = 2 // u32, host order
	wordOffProdFlags = 6 // struct smc_cdc_producer_flags
	wordOffConnFlags = 7 // struct smc_cdc_conn_state_flags
)

// Bits of the wake word at OffWake. The DMB owner sets a bit just before
// its reader or writer sleeps on its doorbell; the peer rings the doorbell
// after a cursor update only when the matching bit is set.
const (
	WakeReader uint64 = 1 << 0 // owner's reader waits for the peer's producer cursor
	WakeWriter uint64 = 1 << 1 // owner's writer waits for the peer's consumer cursor
	// WakeElastic is set by the owner, before it sends the DMB's token, when the DMB is
	// elastic: the owner committed only its first ism.ElasticChunk, and the peer commits
	// further chunks before it writes into them and may give back chunks it no longer
	// needs. The peer reads it once, when it attaches the DMB.
	WakeElastic uint64 = 1 << 2
	// WakeCommitted is set by the peer in an elastic DMB's wake word before it first
	// commits memory beyond the first ism.ElasticChunk. The owner reads it when it hands
	// the DMB to a new connection: without it there is no memory beyond the first chunk
	// to give back, and the owner does not look (ism.DMB.Recommit). A peer that commits
	// without setting it keeps memory in the DMB across reuse, no more than the DMB's
	// size (docs/SECURITY.md). Bit 5: beside the futex bits, below the sleep counter.
	WakeCommitted uint64 = 1 << 5
	// WakeReaderFutex and WakeWriterFutex announce a short sleep of the owner's reader
	// or writer on the wake word's low 32 bits with futex(2), instead of on the doorbell:
	// the peer, after a cursor update, clears the bit and wakes the word (FUTEX_WAKE);
	// the sleeper's timeout bounds the wait whatever the peer does. FutexShift maps
	// WakeReader and WakeWriter to them.
	WakeReaderFutex = WakeReader << FutexShift
	WakeWriterFutex = WakeWriter << FutexShift
	FutexShift      = 3
	// WakeEpoch is the unit of the sleep counter in bits 32..63: every announced sleep
	// adds it, so a peer rings at most once per sleep ("don't re-arm until drained").
	WakeEpoch uint64 = 1 << 32
)

// ProdFlags is struct smc_cdc_producer_flags (SMC-REFERENCE §3.3), carried in
// byte 6 of the consumer cursor word, i.e. byte 22 of the CDC area.
type ProdFlags uint8

// Producer flag bits; the most significant bit comes first on the wire.
const (
	WriteBlocked       ProdFlags = 0x80 // sender could not write everything: peer ring full
	UrgDataPending     ProdFlags = 0x40 // urgent data announced, not yet written
	UrgDataPresent     ProdFlags = 0x20 // last byte before the producer cursor is urgent
	ConsCursUpdReq     ProdFlags = 0x10 // peer asks for a consumer cursor update
	FailoverValidation ProdFlags = 0x08 // SMC-R replay after link failover

	// Writing is smcloop's own, in a bit the kernel leaves reserved, and only between
	// smcloop processes over SMC-D (whose DMBs no kernel can map): the writer is in the
	// middle of one write and publishes its next segment without waiting for anything,
	// so a reader that runs dry waits by spinning, not by sleeping.
	Writing ProdFlags = 0x04

	ProdFlagsReserved ProdFlags = 0x03 // reserved in the kernel's protocol and in ours
)

// ConnFlags is struct smc_cdc_conn_state_flags (SMC-REFERENCE §3.3), carried
// in byte 7 of the consumer cursor word, i.e. byte 23 of the CDC area.
type ConnFlags uint8

// Connection state flag bits.
const (
	PeerDoneWriting ConnFlags = 0x80 // peer shut down its sending side
	PeerConnClosed  ConnFlags = 0x40 // peer closed the connection
	PeerConnAbort   ConnFlags = 0x20 // peer aborted the connection

	ConnFlagsReserved ConnFlags = 0x1F
)

type flagName struct {
	bit  uint8
	name string
}

var prodFlagNames = [...]flagName{
	{uint8(WriteBlocked), "write_blocked"},
	{uint8(UrgDataPending), "urg_data_pending"},
	{uint8(UrgDataPresent), "urg_data_present"},
	{uint8(ConsCursUpdReq), "cons_curs_upd_req"},
	{uint8(FailoverValidation), "failover_validation"},
	{uint8(Writing), "writing"},
}

var connFlagNames = [...]flagName{
	{uint8(PeerDoneWriting), "peer_done_writing"},
	{uint8(PeerConnClosed), "peer_conn_closed"},
	{uint8(PeerConnAbort), "peer_conn_abort"},
}

// String lists the set flags by their kernel field names joined by "|",
// followed by any reserved bits in hex; no flags is "0".
func (f ProdFlags) String() string { return formatFlags(uint8(f), prodFlagNames[:]) }

// String lists the set flags by their kernel field names joined by "|",
// followed by any reserved bits in hex; no flags is "0".
func (f ConnFlags) String() string { return formatFlags(uint8(f), connFlagNames[:]) }

func formatFlags(v uint8, names []flagName) string {
	if v == 0 {
		return "0"
	}
	var sb strings.Builder
	for _, n := range names {
		if v&n.bit == 0 {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('|')
		}
		sb.WriteString(n.name)
		v &^= n.bit
	}
	if v != 0 {
		if sb.Len() > 0 {
			sb.WriteByte('|')
		}
		sb.WriteString("0x")
		sb.WriteString(strconv.FormatUint(uint64(v), 16))
	}
	return sb.String()
}

// PackWord builds the 8-byte cursor word of union smcd_cdc_cursor and
// returns it as the host-order uint64 that [Area] stores atomically: bytes
// 0-1 wrap, 2-5 count (both host order), byte 6 producer flags, byte 7
// connection state flags. The producer cursor word carries zero flags.
func PackWord(c Cursor, pf ProdFlags, cf ConnFlags) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint16(b[wordOffWrap:], c.Wrap)
	binary.NativeEndian.PutUint32(b[wordOffCount:], c.Count)
	b[wordOffProdFlags] = byte(pf)
	b[wordOffConnFlags] = byte(cf)
	return binary.NativeEndian.Uint64(b[:])
}

// UnpackWord splits a cursor word loaded from an [Area] into its cursor and
// flag bytes; it is the inverse of [PackWord]. The result is not validated:
// pass the cursor to [Advance] before using it.
func UnpackWord(w uint64) (c Cursor, pf ProdFlags, cf ConnFlags) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], w)
	c.Wrap = binary.NativeEndian.Uint16(b[wordOffWrap:])
	c.Count = binary.NativeEndian.Uint32(b[wordOffCount:])
	return c, ProdFlags(b[wordOffProdFlags]), ConnFlags(b[wordOffConnFlags])
}

// StampBits is the width of the wake stamp in bytes 1..7 of the type word: the low 56
// bits of a time in nanoseconds, so that differences of up to about two years come out
// right (WakeDelay).
const StampBits = 56

// stampWord packs the low StampBits bits of t into bytes 1..7 of the type word, after
// MsgType in byte 0, in host order as the cursor words are.
func stampWord(t int64) uint64 {
	var b [8]byte
	b[0] = MsgType
	u := uint64(t)
	for i := 1; i < 8; i++ {
		b[i] = byte(u)
		u >>= 8
	}
	return binary.NativeEndian.Uint64(b[:])
}

// stampOf is the inverse of stampWord: the stamp's 56 bits.
func stampOf(w uint64) int64 {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], w)
	var u uint64
	for i := 7; i >= 1; i-- {
		u = u<<8 | uint64(b[i])
	}
	return int64(u)
}

// WakeDelay is the time from the wake stamp stamp (LoadStamp) to now (nanoseconds of the
// same clock), modulo 2^StampBits: how long a short sleeper took to run after its peer
// woke it. ok is false if the difference is not a plausible wake-up, above limit or not
// positive (a stamp of an earlier wake-up, a clock step, a lying peer).
func WakeDelay(stamp, now, limit int64) (d int64, ok bool) {
	d = (now - stamp) & (1<<StampBits - 1)
	return d, d > 0 && d <= limit
}
