// # LLC messages
//
// llc.go holds the LLC (Link Layer Control) messages: the link-management
// SENDs of an SMC-R link group, in the layouts of net/smc/smc_llc.c, each a
// Go type with Len, Append and a Parse function, and [ParseLLC] to dispatch
// on the type. They belong to these exchanges (the state machines are the
// backend's):
//
//   - link setup: after the CLC Confirm, the server sends [ConfirmLink] on
//     the new queue pair and the client answers it (smc_llc_srv_conf_link,
//     smc_llc_cli_conf_link); a second link is proposed by [AddLink] (v1:
//     followed by [AddLinkCont] rounds carrying the rkeys; v2: the rkeys ride
//     in the ADD_LINK extension), invited in v2 by a client's [ReqAddLink],
//     and confirmed again by [ConfirmLink] on the new link;
//   - per RMB: a new RMB's rkey is announced by [ConfirmRKey] and withdrawn
//     by [DeleteRKey] when the RMB is freed (smc_llc_do_confirm_rkey,
//     smc_llc_do_delete_rkey); [ConfirmRKeyCont] exists in the format only;
//   - keepalive: [TestLink], echoed by the peer (smc_llc_testlink_work);
//   - teardown: [DeleteLink] for one link or, with [FlagDeleteLinkAll], the
//     link group (smc_llc_send_link_delete_all).
//
// Every message is 44 bytes (SMC_WR_TX_SIZE, the size of union smc_llc_msg)
// and travels in a 48-byte work-request buffer like the CDC message, whose
// 0xFE type byte no LLC type shares. In an SMC-Rv2 link group two messages
// may be longer, up to 8 KiB (SMC_WR_BUF_V2_SIZE): ADD_LINK with its v2
// extension and REQ_ADD_LINK with its GID list (and, in format, DELETE_RKEY
// with more than nine rkeys). The sender posts those from the link group's
// v2 buffer (smc_wr_tx_v2_send); the receiver's work request scatters the
// first 44 bytes into its receive slot and the rest into the v2 receive
// buffer at offset 44 (smc_wr_init_sge), so the message is contiguous again;
// the Parse functions take it contiguous.
package smcr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Header, struct smc_llc_hdr (4 bytes):
//
//	off size field
//	  0    1 bits 7..4 llc_version (0, or 2 in an SMC-Rv2 link group), bits 3..0 llc_type
//	  1    1 version 0: length, always 44
//	  2    1 version 0: bits 3..0 add_link_rej_rsn, bits 7..4 reserved
//	  1    2 version 2: length_v2, 44..8192, in the sender's host byte order
//	  3    1 flags; 0x80 (SMC_LLC_FLAG_RESP) marks a response
//
// Linux declares length_v2 as u16, not __be16 (smc_llc_init_msg_hdr), so it
// is little-endian from the x86 and arm64 hosts this package interoperates
// with, and this package encodes and decodes it little-endian. For a 44-byte
// message that puts 44 in byte 1 and 0 in byte 2, the version 0 layout with
// no reject reason; a version 2 header carries no add_link_rej_rsn.
const (
	LLCLen      = 44   // SMC_WR_TX_SIZE: every LLC message, and the first part of a long v2 one
	LLCMaxLenV2 = 8192 // SMC_WR_BUF_V2_SIZE: the longest v2 message
	LLCVersion2 = 2    // llc_version in an SMC-Rv2 link group (SMC_V2)

	maxUint24 = 1<<24 - 1
)

// LLCType is the llc_type nibble of an LLC message (enum smc_llc_msg_type,
// smc_llc.h). The on-wire type byte of a version 2 message is 0x20 | type
// (SMC_LLC_CONFIRM_LINK_V2 0x21 ... SMC_LLC_DELETE_RKEY_V2 0x29).
type LLCType uint8

// LLC message types.
const (
	LLCConfirmLink     LLCType = 0x01 // SMC_LLC_CONFIRM_LINK
	LLCAddLink         LLCType = 0x02 // SMC_LLC_ADD_LINK
	LLCAddLinkCont     LLCType = 0x03 // SMC_LLC_ADD_LINK_CONT
	LLCDeleteLink      LLCType = 0x04 // SMC_LLC_DELETE_LINK
	LLCReqAddLink      LLCType = 0x05 // SMC_LLC_REQ_ADD_LINK (v2 only)
	LLCConfirmRKey     LLCType = 0x06 // SMC_LLC_CONFIRM_RKEY
	LLCTestLink        LLCType = 0x07 // SMC_LLC_TEST_LINK
	LLCConfirmRKeyCont LLCType = 0x08 // SMC_LLC_CONFIRM_RKEY_CONT
	LLCDeleteRKey      LLCType = 0x09 // SMC_LLC_DELETE_RKEY
)

func (t LLCType) String() string {
	switch t {
	case LLCConfirmLink:
		return "CONFIRM_LINK"
	case LLCAddLink:
		return "ADD_LINK"
	case LLCAddLinkCont:
		return "ADD_LINK_CONT"
	case LLCDeleteLink:
		return "DELETE_LINK"
	case LLCReqAddLink:
		return "REQ_ADD_LINK"
	case LLCConfirmRKey:
		return "CONFIRM_RKEY"
	case LLCTestLink:
		return "TEST_LINK"
	case LLCConfirmRKeyCont:
		return "CONFIRM_RKEY_CONT"
	case LLCDeleteRKey:
		return "DELETE_RKEY"
	}
	return "llc_type(" + strconv.Itoa(int(t)) + ")"
}

// LLCFlags is the flags byte of the header. Which bits exist depends on the
// message type; FlagResp exists in all.
type LLCFlags uint8

// Header flags (SMC_LLC_FLAG_*).
const (
	FlagResp             LLCFlags = 0x80 // SMC_LLC_FLAG_RESP: a response
	FlagAddLinkReject    LLCFlags = 0x40 // SMC_LLC_FLAG_ADD_LNK_REJ (ADD_LINK response)
	FlagDeleteLinkAll    LLCFlags = 0x40 // SMC_LLC_FLAG_DEL_LINK_ALL: the whole link group
	FlagDeleteLinkOrder  LLCFlags = 0x20 // SMC_LLC_FLAG_DEL_LINK_ORDERLY
	FlagRKeyNeg          LLCFlags = 0x20 // SMC_LLC_FLAG_RKEY_NEG: rkey(s) refused
	FlagRKeyRetry        LLCFlags = 0x10 // SMC_LLC_FLAG_RKEY_RETRY
	FlagNoRMBEEyecatcher LLCFlags = 0x03 // SMC_LLC_FLAG_NO_RMBE_EYEC (CONFIRM_LINK; Linux requires it)
)

// RejectNoAltPath is SMC_LLC_REJ_RSN_NO_ALT_PATH, the add_link_rej_rsn of a
// rejected ADD_LINK.
const RejectNoAltPath = 1

// DELETE_LINK reason codes (SMC_LLC_DEL_*, smc_llc.h).
const (
	DelLostPath     uint32 = 0x00010000 // SMC_LLC_DEL_LOST_PATH
	DelOpInitTerm   uint32 = 0x00020000 // SMC_LLC_DEL_OP_INIT_TERM
	DelProgInitTerm uint32 = 0x00030000 // SMC_LLC_DEL_PROG_INIT_TERM
	DelProtViol     uint32 = 0x00040000 // SMC_LLC_DEL_PROT_VIOL
	DelNoAsymNeeded uint32 = 0x00050000 // SMC_LLC_DEL_NO_ASYM_NEEDED
	DelNoLink       uint32 = 0x00100000 // SMC_LLC_DEL_NOLNK: unknown link id (response)
	DelNoLinkGroup  uint32 = 0x00200000 // SMC_LLC_DEL_NOLGR: unknown link group (response)
)

// ErrMalformedLLC is matched by every LLC decoding error.
var ErrMalformedLLC = errors.New("smcr: malformed LLC message")

// ErrEncode is matched by errors from the LLC Append methods when a value
// cannot be encoded (a count above its maximum, a value wider than its
// field). It is a local error, never caused by peer input.
var ErrEncode = errors.New("smcr: message cannot be encoded")

// LLCError reports a malformed field of a received LLC message, named as in
// smc_llc.c. It matches [ErrMalformedLLC].
type LLCError struct {
	Type  LLCType // message type (0 if not yet known)
	Field string  // e.g. "length", "num_rkeys"
	Got   any
	Want  any
}

func (e *LLCError) Error() string {
	return fmt.Sprintf("smcr: LLC %v: bad %s: got %v, want %v", e.Type, e.Field, e.Got, e.Want)
}

// Is reports whether target is [ErrMalformedLLC].
func (e *LLCError) Is(target error) bool { return target == ErrMalformedLLC }

func llcErr(t LLCType, field string, got, want any) error {
	return &LLCError{Type: t, Field: field, Got: got, Want: want}
}

func llcEncodeErr(t LLCType, format string, args ...any) error {
	return fmt.Errorf("%w: LLC %v: %s", ErrEncode, t, fmt.Sprintf(format, args...))
}

// LLCHeader is a decoded struct smc_llc_hdr.
type LLCHeader struct {
	Version      uint8 // llc_version: 0 or LLCVersion2
	Type         LLCType
	Length       int   // whole message: 44 in version 0, 44..8192 in version 2
	RejectReason uint8 // add_link_rej_rsn, version 0 only
	Flags        LLCFlags
}

// ParseLLCHeader decodes the header of a received LLC message in b, which
// holds the whole message (and possibly more: a receive buffer). Like
// smc_llc_rx_handler it requires at least 44 bytes, length 44 in version 0
// and 44..8192 in version 2; it also requires b to hold Length bytes and
// the type byte to be one Linux registers a handler for.
func ParseLLCHeader(b []byte) (LLCHeader, error) {
	if len(b) < LLCLen {
		return LLCHeader{}, llcErr(0, "length", len(b), ">= 44 bytes received")
	}
	h := LLCHeader{Version: b[0] >> 4, Type: LLCType(b[0] & 0x0f), Flags: LLCFlags(b[3])}
	switch h.Version {
	case 0:
		h.Length = int(b[1])
		h.RejectReason = b[2] & 0x0f
		if h.Length != LLCLen {
			return h, llcErr(h.Type, "length", h.Length, LLCLen)
		}
	case LLCVersion2:
		h.Length = int(binary.LittleEndian.Uint16(b[1:3]))
		if h.Length < LLCLen || h.Length > LLCMaxLenV2 {
			return h, llcErr(h.Type, "length_v2", h.Length, "44..8192")
		}
		if h.Length > len(b) {
			return h, llcErr(h.Type, "length_v2", h.Length, "<= "+strconv.Itoa(len(b))+" (bytes received)")
		}
	default:
		return h, llcErr(h.Type, "llc_version", h.Version, "0 or 2")
	}
	if !registered(h.Version, h.Type) {
		return h, llcErr(h.Type, "llc_type", fmt.Sprintf("%#02x", b[0]), "a type byte of smc_llc_rx_handlers")
	}
	return h, nil
}

// registered reports whether Linux has a receive handler for the type byte
// (smc_llc_rx_handlers): every type in version 0 but REQ_ADD_LINK, every
// type in version 2 but ADD_LINK_CONT and CONFIRM_RKEY_CONT. A message with
// another type byte is dropped unread.
func registered(version uint8, t LLCType) bool {
	switch t {
	case LLCConfirmLink, LLCAddLink, LLCDeleteLink, LLCConfirmRKey, LLCTestLink, LLCDeleteRKey:
		return true
	case LLCAddLinkCont, LLCConfirmRKeyCont:
		return version == 0
	case LLCReqAddLink:
		return version == LLCVersion2
	}
	return false
}

// parseLLC decodes the header of a message of type want; fixed reports that
// the type has no v2 form longer than 44 bytes. It returns the message bytes.
func parseLLC(b []byte, want LLCType, fixed bool) (LLCHeader, []byte, error) {
	h, err := ParseLLCHeader(b)
	if err != nil {
		return h, nil, err
	}
	if h.Type != want {
		return h, nil, llcErr(h.Type, "llc_type", h.Type, want)
	}
	if fixed && h.Length != LLCLen {
		return h, nil, llcErr(h.Type, "length_v2", h.Length, LLCLen)
	}
	return h, b[:h.Length], nil
}

// newLLC returns a zeroed message of n bytes with its header filled in, or
// an error if version is neither 0 nor 2, the type does not exist in that
// version or n does not fit the version.
func newLLC(version uint8, t LLCType, n int, flags LLCFlags) ([]byte, error) {
	switch {
	case version != 0 && version != LLCVersion2:
		return nil, llcEncodeErr(t, "llc_version %d, want 0 or 2", version)
	case !registered(version, t):
		return nil, llcEncodeErr(t, "no such type in llc_version %d", version)
	case version == 0 && n != LLCLen:
		return nil, llcEncodeErr(t, "%d bytes need llc_version 2", n)
	case n > LLCMaxLenV2:
		return nil, llcEncodeErr(t, "%d bytes, max %d", n, LLCMaxLenV2)
	}
	w := make([]byte, n)
	w[0] = version<<4 | byte(t)
	if version == 0 {
		w[1] = byte(n)
	} else {
		binary.LittleEndian.PutUint16(w[1:3], uint16(n))
	}
	w[3] = byte(flags)
	return w, nil
}

func putUint24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func uint24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

// LLCMessage is a decoded LLC message: one of the pointer types below.
type LLCMessage interface {
	// Len returns the encoded length.
	Len() int
	// Append encodes the message onto b, or fails leaving b unchanged.
	Append(b []byte) ([]byte, error)
}

var (
	_ LLCMessage = (*ConfirmLink)(nil)
	_ LLCMessage = (*AddLink)(nil)
	_ LLCMessage = (*AddLinkCont)(nil)
	_ LLCMessage = (*DeleteLink)(nil)
	_ LLCMessage = (*ReqAddLink)(nil)
	_ LLCMessage = (*ConfirmRKey)(nil)
	_ LLCMessage = (*ConfirmRKeyCont)(nil)
	_ LLCMessage = (*TestLink)(nil)
	_ LLCMessage = (*DeleteRKey)(nil)
)

// ParseLLC decodes a received LLC message of any type, dispatching on its
// llc_type. b holds the whole message and may be longer (a receive buffer).
func ParseLLC(b []byte) (LLCMessage, error) {
	h, err := ParseLLCHeader(b)
	if err != nil {
		return nil, err
	}
	// A failed parse must yield a nil interface, not a typed nil pointer.
	var m LLCMessage
	switch h.Type {
	case LLCConfirmLink:
		m, err = nonNil(ParseConfirmLink(b))
	case LLCAddLink:
		m, err = nonNil(ParseAddLink(b))
	case LLCAddLinkCont:
		m, err = nonNil(ParseAddLinkCont(b))
	case LLCDeleteLink:
		m, err = nonNil(ParseDeleteLink(b))
	case LLCReqAddLink:
		m, err = nonNil(ParseReqAddLink(b))
	case LLCConfirmRKey:
		m, err = nonNil(ParseConfirmRKey(b))
	case LLCTestLink:
		m, err = nonNil(ParseTestLink(b))
	case LLCConfirmRKeyCont:
		m, err = nonNil(ParseConfirmRKeyCont(b))
	case LLCDeleteRKey:
		m, err = nonNil(ParseDeleteRKey(b))
	}
	return m, err
}

func nonNil[T LLCMessage](m T, err error) (LLCMessage, error) {
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ConfirmLink is struct smc_llc_msg_confirm_link (type 0x01), the first LLC
// exchange on a new link: the server sends it (request) over the new queue
// pair once the client's CLC Confirm arrived, the client answers with
// FlagResp. Linux sets FlagNoRMBEEyecatcher and refuses a link without it.
//
//	off size field
//	  4    6 sender_mac
//	 10   16 sender_gid
//	 26    3 sender_qp_num
//	 29    1 link_num: the link id the server assigned
//	 30    4 link_uid
//	 34    1 max_links
//	 35    1 max_conns (SMCv2.1; 0 before)
//	 36    8 reserved
type ConfirmLink struct {
	Version  uint8
	Flags    LLCFlags
	MAC      [6]byte
	GID      [16]byte
	QPN      uint32 // 24 bits
	LinkNum  uint8
	LinkUID  [4]byte
	MaxLinks uint8
	MaxConns uint8
}

// Len returns LLCLen.
func (m *ConfirmLink) Len() int { return LLCLen }

// Append encodes m as smc_llc_send_confirm_link does.
func (m *ConfirmLink) Append(b []byte) ([]byte, error) {
	if m.QPN > maxUint24 {
		return b, llcEncodeErr(LLCConfirmLink, "QPN %#x above 24 bits", m.QPN)
	}
	w, err := newLLC(m.Version, LLCConfirmLink, LLCLen, m.Flags)
	if err != nil {
		return b, err
	}
	copy(w[4:10], m.MAC[:])
	copy(w[10:26], m.GID[:])
	putUint24(w[26:29], m.QPN)
	w[29] = m.LinkNum
	copy(w[30:34], m.LinkUID[:])
	w[34], w[35] = m.MaxLinks, m.MaxConns
	return append(b, w...), nil
}

// ParseConfirmLink decodes a CONFIRM_LINK.
func ParseConfirmLink(b []byte) (*ConfirmLink, error) {
	h, w, err := parseLLC(b, LLCConfirmLink, true)
	if err != nil {
		return nil, err
	}
	m := &ConfirmLink{Version: h.Version, Flags: h.Flags, QPN: uint24(w[26:29]), LinkNum: w[29],
		MaxLinks: w[34], MaxConns: w[35]}
	copy(m.MAC[:], w[4:10])
	copy(m.GID[:], w[10:26])
	copy(m.LinkUID[:], w[30:34])
	return m, nil
}

// RKeyPair is struct smc_llc_msg_add_link_cont_rt: an RMB's rkey on the
// existing link and its rkey and address on the new one (16 bytes, BE).
type RKeyPair struct {
	RKey     uint32 // rmb_key: on the link the message travels on
	RKeyNew  uint32 // rmb_key_new: on the link being added
	VAddrNew uint64 // rmb_vaddr_new
}

const rkeyPairLen = 16

func (p *RKeyPair) put(w []byte) {
	binary.BigEndian.PutUint32(w[0:4], p.RKey)
	binary.BigEndian.PutUint32(w[4:8], p.RKeyNew)
	binary.BigEndian.PutUint64(w[8:16], p.VAddrNew)
}

func rkeyPair(w []byte) RKeyPair {
	return RKeyPair{RKey: binary.BigEndian.Uint32(w[0:4]), RKeyNew: binary.BigEndian.Uint32(w[4:8]),
		VAddrNew: binary.BigEndian.Uint64(w[8:16])}
}

// AddLink is struct smc_llc_msg_add_link (type 0x02): the server proposes a
// second link (request), the client answers with its side of it or rejects
// (FlagResp|FlagAddLinkReject, RejectReason RejectNoAltPath). In a v2 link
// group the message carries the v2 extension (Ext) with the rkeys of every
// RMB on the new link, replacing the v1 ADD_LINK_CONT exchange.
//
//	off size field
//	  4    6 sender_mac
//	 10    2 reserved
//	 12   16 sender_gid
//	 28    3 sender_qp_num
//	 29    1 link_num
//	 32    1 bits 3..0 qp_mtu
//	 33    3 initial_psn
//	 36    8 reserved
//	       struct smc_llc_msg_add_link_v2_ext (v2, length_v2 > 44)
//	 44    1 bit 7 v2_direct
//	 45    1 reserved
//	 46   16 client_target_gid
//	 62    8 reserved
//	 70    2 num_rkeys, host byte order like length_v2 (little-endian)
//	 72 16*n rt: RKeyPair entries
type AddLink struct {
	Version      uint8
	Flags        LLCFlags
	RejectReason uint8 // add_link_rej_rsn, 0..15; version 0 only
	MAC          [6]byte
	GID          [16]byte
	QPN          uint32 // 24 bits
	LinkNum      uint8
	QPMTU        uint8  // 0..15
	PSN          uint32 // 24 bits
	Ext          *AddLinkExt
}

// AddLinkExt is struct smc_llc_msg_add_link_v2_ext.
type AddLinkExt struct {
	V2Direct  bool
	TargetGID [16]byte
	// NumRKeys is num_rkeys as sent, the link group's connection count;
	// it is at least len(RKeys) (Linux sends fewer entries when it finds
	// fewer RMBs in use) and at most 255 (SMC_LLC_RKEYS_PER_MSG_V2).
	NumRKeys uint16
	RKeys    []RKeyPair
}

const (
	addLinkExtLen  = 28
	maxRKeysPerV2  = 255 // SMC_LLC_RKEYS_PER_MSG_V2
	maxRejectValue = 15
)

// Len returns the encoded length: 44, plus the extension in version 2.
func (m *AddLink) Len() int {
	if m.Ext == nil {
		return LLCLen
	}
	return LLCLen + addLinkExtLen + rkeyPairLen*len(m.Ext.RKeys)
}

// Append encodes m as smc_llc_send_add_link does.
func (m *AddLink) Append(b []byte) ([]byte, error) {
	t := LLCAddLink
	switch {
	case m.QPN > maxUint24 || m.PSN > maxUint24:
		return b, llcEncodeErr(t, "QPN %#x / PSN %#x above 24 bits", m.QPN, m.PSN)
	case m.QPMTU > 15 || m.RejectReason > maxRejectValue:
		return b, llcEncodeErr(t, "QP MTU %d / reject reason %d not in 0..15", m.QPMTU, m.RejectReason)
	case m.RejectReason != 0 && m.Version != 0:
		return b, llcEncodeErr(t, "reject reason in a version %d header", m.Version)
	case m.Ext != nil && m.Version != LLCVersion2:
		return b, llcEncodeErr(t, "v2 extension in a version %d message", m.Version)
	case m.Ext != nil && (int(m.Ext.NumRKeys) < len(m.Ext.RKeys) || m.Ext.NumRKeys > maxRKeysPerV2):
		return b, llcEncodeErr(t, "num_rkeys %d for %d entries, want entries..255", m.Ext.NumRKeys, len(m.Ext.RKeys))
	}
	w, err := newLLC(m.Version, t, m.Len(), m.Flags)
	if err != nil {
		return b, err
	}
	w[2] |= m.RejectReason
	copy(w[4:10], m.MAC[:])
	copy(w[12:28], m.GID[:])
	putUint24(w[28:31], m.QPN)
	w[31] = m.LinkNum
	w[32] = m.QPMTU
	putUint24(w[33:36], m.PSN)
	if x := m.Ext; x != nil {
		if x.V2Direct {
			w[44] = 0x80
		}
		copy(w[46:62], x.TargetGID[:])
		binary.LittleEndian.PutUint16(w[70:72], x.NumRKeys)
		for i := range x.RKeys {
			x.RKeys[i].put(w[72+rkeyPairLen*i:])
		}
	}
	return append(b, w...), nil
}

// ParseAddLink decodes an ADD_LINK. A version 2 message longer than 44
// bytes must hold the whole extension, its entries filling the rest exactly.
func ParseAddLink(b []byte) (*AddLink, error) {
	h, w, err := parseLLC(b, LLCAddLink, false)
	if err != nil {
		return nil, err
	}
	m := &AddLink{Version: h.Version, Flags: h.Flags, RejectReason: h.RejectReason,
		QPN: uint24(w[28:31]), LinkNum: w[31], QPMTU: w[32] & 0x0f, PSN: uint24(w[33:36])}
	copy(m.MAC[:], w[4:10])
	copy(m.GID[:], w[12:28])
	if len(w) == LLCLen {
		return m, nil
	}
	rest := len(w) - LLCLen - addLinkExtLen
	if rest < 0 || rest%rkeyPairLen != 0 {
		return nil, llcErr(h.Type, "length_v2", len(w), "44 or 72 + 16*n")
	}
	x := &AddLinkExt{V2Direct: w[44]&0x80 != 0, NumRKeys: binary.LittleEndian.Uint16(w[70:72])}
	copy(x.TargetGID[:], w[46:62])
	n := rest / rkeyPairLen
	if int(x.NumRKeys) < n || x.NumRKeys > maxRKeysPerV2 {
		return nil, llcErr(h.Type, "num_rkeys", x.NumRKeys, strconv.Itoa(n)+"..255")
	}
	for i := 0; i < n; i++ {
		x.RKeys = append(x.RKeys, rkeyPair(w[72+rkeyPairLen*i:]))
	}
	m.Ext = x
	return m, nil
}

// AddLinkCont is struct smc_llc_msg_add_link_cont (type 0x03, version 0
// only): in a v1 link group, after ADD_LINK, server and client take turns sending the rkeys of
// their RMBs on the new link, two per message, until both have none left.
//
//	off size field
//	  4    1 link_num
//	  5    1 num_rkeys: rkeys still to send, this message's included
//	  6    2 reserved
//	  8   32 rt[2]: RKeyPair entries, min(num_rkeys, 2) of them used
//	 40    4 reserved
type AddLinkCont struct {
	Version  uint8
	Flags    LLCFlags
	LinkNum  uint8
	NumRKeys uint8
	RKeys    []RKeyPair // min(NumRKeys, 2) entries
}

const rkeysPerCont = 2 // SMC_LLC_RKEYS_PER_CONT_MSG

// Len returns LLCLen.
func (m *AddLinkCont) Len() int { return LLCLen }

// Append encodes m as smc_llc_add_link_cont does.
func (m *AddLinkCont) Append(b []byte) ([]byte, error) {
	if len(m.RKeys) != min(int(m.NumRKeys), rkeysPerCont) {
		return b, llcEncodeErr(LLCAddLinkCont, "%d entries for num_rkeys %d", len(m.RKeys), m.NumRKeys)
	}
	w, err := newLLC(m.Version, LLCAddLinkCont, LLCLen, m.Flags)
	if err != nil {
		return b, err
	}
	w[4], w[5] = m.LinkNum, m.NumRKeys
	for i := range m.RKeys {
		m.RKeys[i].put(w[8+rkeyPairLen*i:])
	}
	return append(b, w...), nil
}

// ParseAddLinkCont decodes an ADD_LINK_CONT.
func ParseAddLinkCont(b []byte) (*AddLinkCont, error) {
	h, w, err := parseLLC(b, LLCAddLinkCont, true)
	if err != nil {
		return nil, err
	}
	m := &AddLinkCont{Version: h.Version, Flags: h.Flags, LinkNum: w[4], NumRKeys: w[5]}
	for i := 0; i < min(int(m.NumRKeys), rkeysPerCont); i++ {
		m.RKeys = append(m.RKeys, rkeyPair(w[8+rkeyPairLen*i:]))
	}
	return m, nil
}

// DeleteLink is struct smc_llc_msg_del_link (type 0x04): one link
// (LinkNum) or, with FlagDeleteLinkAll, the whole link group goes away;
// FlagDeleteLinkOrder marks an orderly shutdown; the peer answers with
// FlagResp.
//
//	off size field
//	  4    1 link_num
//	  5    4 reason (DelLostPath ...)
//	  9   35 reserved
type DeleteLink struct {
	Version uint8
	Flags   LLCFlags
	LinkNum uint8
	Reason  uint32
}

// Len returns LLCLen.
func (m *DeleteLink) Len() int { return LLCLen }

// Append encodes m as smc_llc_send_delete_link does.
func (m *DeleteLink) Append(b []byte) ([]byte, error) {
	w, err := newLLC(m.Version, LLCDeleteLink, LLCLen, m.Flags)
	if err != nil {
		return b, err
	}
	w[4] = m.LinkNum
	binary.BigEndian.PutUint32(w[5:9], m.Reason)
	return append(b, w...), nil
}

// ParseDeleteLink decodes a DELETE_LINK.
func ParseDeleteLink(b []byte) (*DeleteLink, error) {
	h, w, err := parseLLC(b, LLCDeleteLink, true)
	if err != nil {
		return nil, err
	}
	return &DeleteLink{Version: h.Version, Flags: h.Flags, LinkNum: w[4],
		Reason: binary.BigEndian.Uint32(w[5:9])}, nil
}

// ReqAddLink is struct smc_llc_msg_req_add_link_v2 (type 0x05, v2 link
// groups only): a client with more than one usable RoCEv2 GID invites the
// server to start an ADD_LINK exchange; the server answers with a 44-byte
// FlagResp message whose GID list is empty.
//
//	off size field
//	  4   20 reserved
//	 24    1 gid_cnt n
//	 25    3 reserved
//	 28 16*n gid: the client's GIDs
type ReqAddLink struct {
	Flags LLCFlags
	GIDs  [][16]byte
}

const reqAddLinkLen = 28

// Len returns the encoded length, at least 44.
func (m *ReqAddLink) Len() int { return max(LLCLen, reqAddLinkLen+16*len(m.GIDs)) }

// Append encodes m as smc_llc_send_request_add_link does.
func (m *ReqAddLink) Append(b []byte) ([]byte, error) {
	if len(m.GIDs) > 0xFF {
		return b, llcEncodeErr(LLCReqAddLink, "%d GIDs, max 255", len(m.GIDs))
	}
	w, err := newLLC(LLCVersion2, LLCReqAddLink, m.Len(), m.Flags)
	if err != nil {
		return b, err
	}
	w[24] = uint8(len(m.GIDs))
	for i := range m.GIDs {
		copy(w[reqAddLinkLen+16*i:], m.GIDs[i][:])
	}
	return append(b, w...), nil
}

// ParseReqAddLink decodes a REQ_ADD_LINK (version 2, as the header check
// requires): its GIDs inside the message, which is no longer than 44 bytes
// or than its GIDs need.
func ParseReqAddLink(b []byte) (*ReqAddLink, error) {
	h, w, err := parseLLC(b, LLCReqAddLink, false)
	if err != nil {
		return nil, err
	}
	m := &ReqAddLink{Flags: h.Flags}
	n := int(w[24])
	if want := max(LLCLen, reqAddLinkLen+16*n); len(w) != want {
		return nil, llcErr(h.Type, "length_v2", len(w), want)
	}
	for i := 0; i < n; i++ {
		var g [16]byte
		copy(g[:], w[reqAddLinkLen+16*i:])
		m.GIDs = append(m.GIDs, g)
	}
	return m, nil
}

// RToken is struct smc_rmb_rtoken (13 bytes, packed): an RMB's rkey and
// address on one link.
type RToken struct {
	LinkID uint8 // link_id; for the first token of a CONFIRM_RKEY, see there
	RKey   uint32
	VAddr  uint64
}

const rtokenLen = 13

func (r *RToken) put(w []byte) {
	w[0] = r.LinkID
	binary.BigEndian.PutUint32(w[1:5], r.RKey)
	binary.BigEndian.PutUint64(w[5:13], r.VAddr)
}

func rtoken(w []byte) RToken {
	return RToken{LinkID: w[0], RKey: binary.BigEndian.Uint32(w[1:5]), VAddr: binary.BigEndian.Uint64(w[5:13])}
}

// ConfirmRKey is struct smc_llc_msg_confirm_rkey (type 0x06): when a
// connection gets a new RMB, its owner announces the RMB's rkey and address
// on the link the message travels on (RKey, VAddr) and on each other link
// of the group (Others); the peer answers with FlagResp, adding FlagRKeyNeg
// (and FlagRKeyRetry) if it could not store them.
//
//	off size field
//	  4    1 rtoken[0].num_rkeys: number of Others (0..2)
//	  5    4 rtoken[0].rmb_key
//	  9    8 rtoken[0].rmb_vaddr
//	 17   13 rtoken[1]: link_id, rmb_key, rmb_vaddr
//	 30   13 rtoken[2]
//	 43    1 reserved
type ConfirmRKey struct {
	Version uint8
	Flags   LLCFlags
	RKey    uint32
	VAddr   uint64
	Others  []RToken // at most 2 (SMC_LLC_RKEYS_PER_MSG - 1)
}

const rkeysPerMsg = 3 // SMC_LLC_RKEYS_PER_MSG

// Len returns LLCLen.
func (m *ConfirmRKey) Len() int { return LLCLen }

// Append encodes m as smc_llc_send_confirm_rkey does.
func (m *ConfirmRKey) Append(b []byte) ([]byte, error) {
	if len(m.Others) > rkeysPerMsg-1 {
		return b, llcEncodeErr(LLCConfirmRKey, "%d other links, max 2", len(m.Others))
	}
	w, err := newLLC(m.Version, LLCConfirmRKey, LLCLen, m.Flags)
	if err != nil {
		return b, err
	}
	first := RToken{LinkID: uint8(len(m.Others)), RKey: m.RKey, VAddr: m.VAddr}
	first.put(w[4:])
	for i := range m.Others {
		m.Others[i].put(w[4+rtokenLen*(i+1):])
	}
	return append(b, w...), nil
}

// ParseConfirmRKey decodes a CONFIRM_RKEY. Linux answers num_rkeys above 3
// with FlagRKeyNeg and reads at most two other tokens; this parser rejects
// num_rkeys above 2, which cannot describe a link group of three links.
func ParseConfirmRKey(b []byte) (*ConfirmRKey, error) {
	h, w, err := parseLLC(b, LLCConfirmRKey, true)
	if err != nil {
		return nil, err
	}
	first := rtoken(w[4:])
	if first.LinkID > rkeysPerMsg-1 {
		return nil, llcErr(h.Type, "num_rkeys", first.LinkID, "<= 2")
	}
	m := &ConfirmRKey{Version: h.Version, Flags: h.Flags, RKey: first.RKey, VAddr: first.VAddr}
	for i := 1; i <= int(first.LinkID); i++ {
		m.Others = append(m.Others, rtoken(w[4+rtokenLen*i:]))
	}
	return m, nil
}

// ConfirmRKeyCont is struct smc_llc_msg_confirm_rkey_cont (type 0x08,
// version 0 only), the
// RFC 7609 continuation of a CONFIRM_RKEY for link groups of more than three
// links. Linux neither sends it nor acts on it (three tokens fit one
// CONFIRM_RKEY); a receiver recognises and ignores it.
//
//	off size field
//	  4    1 num_rkeys: tokens still to send, this message's included
//	  5   39 rtoken[3]: min(num_rkeys, 3) of them used
type ConfirmRKeyCont struct {
	Version  uint8
	Flags    LLCFlags
	NumRKeys uint8
	Tokens   []RToken // min(NumRKeys, 3) entries
}

// Len returns LLCLen.
func (m *ConfirmRKeyCont) Len() int { return LLCLen }

// Append encodes m.
func (m *ConfirmRKeyCont) Append(b []byte) ([]byte, error) {
	if len(m.Tokens) != min(int(m.NumRKeys), rkeysPerMsg) {
		return b, llcEncodeErr(LLCConfirmRKeyCont, "%d tokens for num_rkeys %d", len(m.Tokens), m.NumRKeys)
	}
	w, err := newLLC(m.Version, LLCConfirmRKeyCont, LLCLen, m.Flags)
	if err != nil {
		return b, err
	}
	w[4] = m.NumRKeys
	for i := range m.Tokens {
		m.Tokens[i].put(w[5+rtokenLen*i:])
	}
	return append(b, w...), nil
}

// ParseConfirmRKeyCont decodes a CONFIRM_RKEY_CONT.
func ParseConfirmRKeyCont(b []byte) (*ConfirmRKeyCont, error) {
	h, w, err := parseLLC(b, LLCConfirmRKeyCont, true)
	if err != nil {
		return nil, err
	}
	m := &ConfirmRKeyCont{Version: h.Version, Flags: h.Flags, NumRKeys: w[4]}
	for i := 0; i < min(int(m.NumRKeys), rkeysPerMsg); i++ {
		m.Tokens = append(m.Tokens, rtoken(w[5+rtokenLen*i:]))
	}
	return m, nil
}

// TestLink is struct smc_llc_msg_test_link (type 0x07), the link keepalive:
// when a link has received nothing for the testlink time
// (net.smc.smcr_testlink_time, 30 s by default) Linux sends one and takes
// the link down if the FlagResp echo does not come back in time.
//
//	off size field
//	  4   16 user_data, echoed
//	 20   24 reserved
type TestLink struct {
	Version  uint8
	Flags    LLCFlags
	UserData [16]byte
}

// Len returns LLCLen.
func (m *TestLink) Len() int { return LLCLen }

// Append encodes m as smc_llc_send_test_link does.
func (m *TestLink) Append(b []byte) ([]byte, error) {
	w, err := newLLC(m.Version, LLCTestLink, LLCLen, m.Flags)
	if err != nil {
		return b, err
	}
	copy(w[4:20], m.UserData[:])
	return append(b, w...), nil
}

// ParseTestLink decodes a TEST_LINK.
func ParseTestLink(b []byte) (*TestLink, error) {
	h, w, err := parseLLC(b, LLCTestLink, true)
	if err != nil {
		return nil, err
	}
	m := &TestLink{Version: h.Version, Flags: h.Flags}
	copy(m.UserData[:], w[4:20])
	return m, nil
}

// DeleteRKey is struct smc_llc_msg_delete_rkey (type 0x09) and, in a v2 link
// group, struct smc_llc_msg_delete_rkey_v2: when an RMB is freed its owner
// withdraws its rkey(s); the peer answers with FlagResp, adding FlagRKeyNeg
// and ErrMask if it did not know some.
//
//	off size field
//	  4    1 num_rkeys n
//	  5    1 v0: err_mask, bit 7-i set if rkey i was unknown
//	         v2: num_inval_rkeys, the count of unknown rkeys
//	  6    2 reserved
//	  8  4*n rkey (v0: room for 8, then 4 reserved; v2: up to 255, the
//	         message growing past 44 bytes beyond 9)
//
// Linux sends one rkey per message in both versions.
type DeleteRKey struct {
	Version uint8
	Flags   LLCFlags
	ErrMask uint8
	RKeys   []uint32 // v0: at most 8 (SMC_LLC_DEL_RKEY_MAX); v2: at most 255
}

const (
	delRKeyMax   = 8 // SMC_LLC_DEL_RKEY_MAX
	delRKeyHdr   = 8
	delRKeyMaxV2 = maxRKeysPerV2
)

// Len returns the encoded length, 44 unless a v2 message lists more than 9
// rkeys.
func (m *DeleteRKey) Len() int { return max(LLCLen, delRKeyHdr+4*len(m.RKeys)) }

// Append encodes m as smc_llc_send_delete_rkey does.
func (m *DeleteRKey) Append(b []byte) ([]byte, error) {
	limit := delRKeyMax
	if m.Version == LLCVersion2 {
		limit = delRKeyMaxV2
	}
	if len(m.RKeys) > limit {
		return b, llcEncodeErr(LLCDeleteRKey, "%d rkeys, max %d in version %d", len(m.RKeys), limit, m.Version)
	}
	w, err := newLLC(m.Version, LLCDeleteRKey, m.Len(), m.Flags)
	if err != nil {
		return b, err
	}
	w[4], w[5] = uint8(len(m.RKeys)), m.ErrMask
	for i, k := range m.RKeys {
		binary.BigEndian.PutUint32(w[delRKeyHdr+4*i:], k)
	}
	return append(b, w...), nil
}

// ParseDeleteRKey decodes a DELETE_RKEY. Linux reads at most 8 rkeys (v0)
// or 255 (v2) whatever num_rkeys says; this parser rejects a larger count,
// and a v2 message whose length is not max(44, 8 + 4*num_rkeys).
func ParseDeleteRKey(b []byte) (*DeleteRKey, error) {
	h, w, err := parseLLC(b, LLCDeleteRKey, false)
	if err != nil {
		return nil, err
	}
	n := int(w[4])
	if h.Version == 0 && n > delRKeyMax {
		return nil, llcErr(h.Type, "num_rkeys", n, "<= 8")
	}
	if want := max(LLCLen, delRKeyHdr+4*n); len(w) != want {
		return nil, llcErr(h.Type, "length_v2", len(w), want)
	}
	m := &DeleteRKey{Version: h.Version, Flags: h.Flags, ErrMask: w[5]}
	for i := 0; i < n; i++ {
		m.RKeys = append(m.RKeys, binary.BigEndian.Uint32(w[delRKeyHdr+4*i:]))
	}
	return m, nil
}
