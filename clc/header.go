package clc

import (
	"encoding/binary"
	"strconv"
	"time"
)

// MsgType is the CLC message type in byte 4 of the header.
type MsgType uint8

// CLC message types (SMC_CLC_PROPOSAL ... SMC_CLC_DECLINE).
const (
	TypeProposal MsgType = 1
	TypeAccept   MsgType = 2
	TypeConfirm  MsgType = 3
	TypeDecline  MsgType = 4
)

func (t MsgType) String() string {
	switch t {
	case TypeProposal:
		return "proposal"
	case TypeAccept:
		return "accept"
	case TypeConfirm:
		return "confirm"
	case TypeDecline:
		return "decline"
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// Path is a 2-bit SMC type field (SMC_TYPE_R, _D, _N, _B): in a Proposal
// what is offered for v1 (typev1) and v2 (typev2), in an Accept or Confirm
// (typev1 only) the chosen variant.
type Path uint8

// Path values.
const (
	PathR Path = 0 // SMC-R only
	PathD Path = 1 // SMC-D only
	PathN Path = 2 // neither
	PathB Path = 3 // both SMC-R and SMC-D
)

func (p Path) String() string {
	switch p {
	case PathR:
		return "R"
	case PathD:
		return "D"
	case PathN:
		return "N"
	case PathB:
		return "B"
	}
	return "path(" + strconv.Itoa(int(p)) + ")"
}

// HasD reports whether p includes SMC-D (the kernel's smcd_indicated).
func (p Path) HasD() bool { return p == PathD || p == PathB }

// HasR reports whether p includes SMC-R (the kernel's smcr_indicated).
func (p Path) HasR() bool { return p == PathR || p == PathB }

// Eyecatchers: "SMCR" and "SMCD" in EBCDIC. Linux sends EyecatcherR in
// Proposal and Decline and EyecatcherD in SMC-D Accept and Confirm; a
// receiver accepts either in header and trailer (smc_clc_msg_hdr_valid).
var (
	EyecatcherR = [4]byte{0xE2, 0xD4, 0xC3, 0xD9}
	EyecatcherD = [4]byte{0xE2, 0xD4, 0xC3, 0xC4}
)

// Sizes, limits and timing (SMC-REFERENCE §1; smc_clc.[ch]).
const (
	HeaderLen  = 8 // struct smc_clc_msg_hdr
	TrailerLen = 4 // struct smc_clc_msg_trail

	// MaxProposalLen is sizeof(struct smc_clc_msg_proposal_area): a
	// Proposal with every list at its maximum.
	MaxProposalLen = 652
	// MaxMsgLen bounds every other message accepted by ReadMsg. The
	// largest one Linux sends is an SMC-R v2 first-contact Confirm
	// (108 + 52 + 4 + 2*16 = 196 bytes); the slack is for extensions.
	MaxMsgLen = 1024

	// RecvBufLen is the chunk size used to drain an oversize message
	// (SMC_CLC_RECV_BUF_LEN).
	RecvBufLen = 100
	// WaitTime is how long a peer waits for each CLC message
	// (CLC_WAIT_TIME).
	WaitTime = 6 * time.Second
	// WaitTimeShort is CLC_WAIT_TIME_SHORT, the wait for a possible
	// Decline during SMC-R first-link confirmation.
	WaitTimeShort = 1 * time.Second

	MaxV2GIDEntries = 8  // SMCD_CLC_MAX_V2_GID_ENTRIES
	MaxUEIDs        = 8  // SMC_CLC_MAX_UEID
	MaxIPv6Prefixes = 8  // SMC_CLC_MAX_V6_PREFIX
	EIDLen          = 32 // SMC_MAX_EID_LEN
	HostnameLen     = 32 // SMC_MAX_HOSTNAME_LEN
	PeerIDLen       = 8  // SMC_SYSTEMID_LEN
	LinkIDLen       = 4  // SMC_LGR_ID_SIZE
	GIDLen          = 16 // SMC_GID_SIZE: a RoCE GID
	MACLen          = 6  // ETH_ALEN: a RoCE port's MAC

	// CHIDLoopback is the CHID of the loopback (emulated) ISM device.
	CHIDLoopback = 0xFFFF
	// CHIDEmulatedMask selects the CHID range 0xFF00-0xFFFF reserved for
	// Emulated-ISM devices; see [EmulatedCHID].
	CHIDEmulatedMask = 0xFF00
)

// SMC protocol versions and releases.
const (
	V1 = 1 // SMC_V1
	V2 = 2 // SMC_V2

	Release0 = 0 // SMCv2
	Release1 = 1 // SMCv2.1 (SMC_RELEASE_1): max_conns/max_links/feature_mask
)

// OS types carried in the Decline and first-contact extension (SMC_CLC_OS_*).
const (
	OSZOS   = 1
	OSLinux = 2
	OSAIX   = 3
)

// FeatureEmulatedISM is bit 0 of feature_mask (BIT(SMC_SPF_EMULATED_ISM_DEV)):
// the peer supports Emulated-ISM devices such as loopback.
const FeatureEmulatedISM uint16 = 1 << 0

// HeaderFlag is bit 3 of header byte 7, SMC_FIRST_CONTACT_MASK (0b10)
// inside the typev2 field. See [Header.Flag].
const HeaderFlag = 0x08

// EmulatedCHID reports whether chid belongs to an Emulated-ISM device.
// Such a device has a 128-bit GID and takes two GID/CHID entries in a
// Proposal and a GID extension in Accept/Confirm.
func EmulatedCHID(chid uint16) bool { return chid&CHIDEmulatedMask == CHIDEmulatedMask }

// Header is the common 8-byte CLC header (struct smc_clc_msg_hdr,
// RFC 7609 App. A; SMC-REFERENCE §1.2):
//
//	off size field
//	  0    4 eyecatcher, EyecatcherR or EyecatcherD
//	  4    1 type (MsgType)
//	  5    2 length of the whole message incl. header and trailer, BE
//	  7    1 bits 7..4 version, bits 3..2 typev2, bits 1..0 typev1
//
// The meaning of typev2 depends on the message. In a Proposal it is the
// Path offered for v2. In Accept and Confirm its high bit (0x08 of byte 7,
// [HeaderFlag]) is "first contact": the sender creates a new link group;
// in a Decline the same bit is "out of sync" (sent with [DeclSyncErr]; the
// receiver terminates the link group). Version 1 called that bit "flag".
// [Header.Flag] and [Header.SetFlag] access it.
type Header struct {
	Eyecatcher [4]byte
	Type       MsgType
	Length     uint16
	Version    uint8 // 4 bits
	TypeV2     Path  // 2 bits; see the type comment for Accept/Confirm/Decline
	TypeV1     Path  // 2 bits
}

// Flag reports bit 0x08 of byte 7: first contact in Accept/Confirm,
// out-of-sync in Decline.
func (h Header) Flag() bool { return h.byte7()&HeaderFlag != 0 }

// SetFlag sets or clears bit 0x08 of byte 7, leaving bit 0x04 alone.
func (h *Header) SetFlag(on bool) {
	if on {
		h.TypeV2 |= HeaderFlag >> 2
	} else {
		h.TypeV2 &^= HeaderFlag >> 2
	}
}

func (h Header) byte7() byte {
	return h.Version<<4 | byte(h.TypeV2&3)<<2 | byte(h.TypeV1&3)
}

// Append encodes h; Version above 15 and path values above 3 are truncated
// to their bit fields.
func (h Header) Append(b []byte) []byte {
	b = append(b, h.Eyecatcher[:]...)
	b = append(b, byte(h.Type))
	b = binary.BigEndian.AppendUint16(b, h.Length)
	return append(b, h.byte7())
}

// ParseHeader decodes the first HeaderLen bytes of b. It checks what the
// kernel checks before trusting a header: the eyecatcher (either variant)
// and version >= 1. It does not check the type or the length.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fieldErr(0, "length", len(b), ">= 8 (header)")
	}
	var h Header
	copy(h.Eyecatcher[:], b[0:4])
	h.Type = MsgType(b[4])
	h.Length = binary.BigEndian.Uint16(b[5:7])
	h.Version = b[7] >> 4
	h.TypeV2 = Path(b[7] >> 2 & 3)
	h.TypeV1 = Path(b[7] & 3)
	if !validEyecatcher(h.Eyecatcher[:]) {
		return h, fieldErr(h.Type, "eyecatcher", h.Eyecatcher, "SMCR or SMCD (EBCDIC)")
	}
	if h.Version < V1 {
		return h, fieldErr(h.Type, "version", h.Version, ">= 1")
	}
	return h, nil
}

func validEyecatcher(b []byte) bool {
	return len(b) == 4 && (string(b) == string(EyecatcherR[:]) || string(b) == string(EyecatcherD[:]))
}

// parseFramed decodes the header of a complete message of type want (or,
// for Accept/Confirm, either of those) and checks that the header length
// equals len(msg) and, if checkTrailer, that the last four bytes are an
// eyecatcher. min is the smallest length to accept for the type.
func parseFramed(msg []byte, want MsgType, min int, checkTrailer bool) (Header, error) {
	h, err := ParseHeader(msg)
	if err != nil {
		return h, err
	}
	switch {
	case want == TypeAccept && h.Type != TypeAccept && h.Type != TypeConfirm:
		return h, fieldErr(h.Type, "type", h.Type, "accept or confirm")
	case want != TypeAccept && h.Type != want:
		return h, fieldErr(h.Type, "type", h.Type, want)
	}
	if int(h.Length) != len(msg) {
		return h, fieldErr(h.Type, "length", h.Length, len(msg))
	}
	if len(msg) < min {
		return h, fieldErr(h.Type, "length", len(msg), ">= "+strconv.Itoa(min))
	}
	if checkTrailer && !validEyecatcher(msg[len(msg)-TrailerLen:]) {
		var got [4]byte
		copy(got[:], msg[len(msg)-TrailerLen:])
		return h, fieldErr(h.Type, "trailer", got, "SMCR or SMCD (EBCDIC)")
	}
	return h, nil
}
