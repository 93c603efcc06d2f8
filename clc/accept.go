package clc

import "encoding/binary"

// SMC-D Accept (type 2) and Confirm (type 3) share one layout: the SMC-D
// half of struct smc_clc_msg_accept_confirm (smcd_clc_msg_accept_confirm_common
// d0 + d1) and struct smc_clc_first_contact_ext[_v2x] (smc_clc.h;
// SMC-REFERENCE §1.4):
//
//	off  size  field
//	  0     8  header: typev1 = D, 0x08 of byte 7 = first contact, EyecatcherD
//	  8     8  sender ISM GID (upper 64 bits for Emulated-ISM)
//	 16     8  DMB token
//	 24     1  DMBE index
//	 25     1  bits 7..4 DMBE size (compressed), bits 3..0 reserved
//	 26     2  reserved
//	 28     4  link id (link-group id)
//	 32    12  v1: reserved; trailer at 44, length 48
//	 32     2  v2: CHID
//	 34    32  v2: negotiated EID
//	 66     8  v2: GID extension (Emulated-ISM low 64 bits, else 0)
//	 74        v2 + first contact: first-contact extension
//	 +0     1  bit 7 v2_direct (SMC-R only)
//	 +1     1  bits 7..4 OS type, bits 3..0 SMC release
//	 +2     2  reserved
//	 +4    32  hostname (blank padded)
//	           release >= 1 (v2x) only:
//	+36     1  max_conns (SMC-R only)
//	+37     1  max_links (SMC-R only)
//	+38     2  feature_mask
//	+40     4  vendor options
//	+44     8  reserved
//	end     4  trailer: EyecatcherD; v2 length 78 (+36 or +52)
const (
	AcceptConfirmLenV1 = 48 // SMCD_CLC_ACCEPT_CONFIRM_LEN
	AcceptConfirmLenV2 = 78 // SMCD_CLC_ACCEPT_CONFIRM_LEN_V2
	FCELen             = 36 // struct smc_clc_first_contact_ext
	FCEV2xLen          = 52 // struct smc_clc_first_contact_ext_v2x

	// SMCRAcceptConfirmLenV1 and SMCRAcceptConfirmLenV2 are the SMC-R
	// lengths (SMCR_CLC_ACCEPT_CONFIRM_LEN[_V2]); see [AcceptConfirmR].
	SMCRAcceptConfirmLenV1 = 68
	SMCRAcceptConfirmLenV2 = 108

	fceOffset = AcceptConfirmLenV2 - TrailerLen // 74
)

// AcceptConfirm is an SMC-D Accept (sent by the server) or Confirm (sent by
// the client). CHID, EID, GIDExt and FCE exist in version 2 only and are
// ignored by Append and zero after parsing in version 1.
type AcceptConfirm struct {
	Type         MsgType // TypeAccept or TypeConfirm
	Version      uint8   // 1 or 2
	FirstContact bool    // sender creates a new link group

	GID      uint64 // sender's ISM GID
	Token    uint64 // DMB token of the sender's receive buffer
	DMBEIdx  uint8  // Linux always sends 0
	DMBESize uint8  // compressed size nibble 0..15, as on the wire
	LinkID   [LinkIDLen]byte

	// v2.
	CHID   uint16
	EID    [EIDLen]byte
	GIDExt uint64

	// FCE is the first-contact extension: required in v2 when
	// FirstContact is set, ignored otherwise.
	FCE *FirstContactExt
}

// FirstContactExt is struct smc_clc_first_contact_ext_v2x. Its encoded size
// is FCELen for Release 0 and FCEV2xLen for Release >= 1; the fields after
// Hostname exist only in the longer form.
type FirstContactExt struct {
	OSType   uint8 // 0..15; OSLinux
	Release  uint8 // 0..15; negotiated SMC release
	Hostname [HostnameLen]byte

	// SMCv2.1 (Release >= 1).
	MaxConns    uint8 // SMC-R only; reserved for SMC-D
	MaxLinks    uint8 // SMC-R only; reserved for SMC-D
	FeatureMask uint16
	VendorOpts  [4]byte
}

// Len returns the encoded length of the extension.
func (f *FirstContactExt) Len() int {
	if f.Release >= Release1 {
		return FCEV2xLen
	}
	return FCELen
}

func (m *AcceptConfirm) hasFCE() bool { return m.Version >= V2 && m.FirstContact }

// Len returns the encoded length, header and trailer included.
func (m *AcceptConfirm) Len() int {
	if m.Version < V2 {
		return AcceptConfirmLenV1
	}
	n := AcceptConfirmLenV2
	if m.hasFCE() {
		if m.FCE != nil {
			n += m.FCE.Len()
		} else {
			n += FCELen
		}
	}
	return n
}

// Append encodes m onto b as smcd_clc_prep_confirm_accept does. It fails,
// leaving b unchanged, if Type is not Accept or Confirm, a value does not
// fit its bit field, or a v2 first-contact message has no FCE.
func (m *AcceptConfirm) Append(b []byte) ([]byte, error) {
	t := m.Type
	switch {
	case t != TypeAccept && t != TypeConfirm:
		return b, encodeErr(t, "type %d is neither accept nor confirm", t)
	case m.Version < V1 || m.Version > 15:
		return b, encodeErr(t, "version %d not in 1..15", m.Version)
	case m.DMBESize > 15:
		return b, encodeErr(t, "DMBE size %d not in 0..15", m.DMBESize)
	case m.hasFCE() && m.FCE == nil:
		return b, encodeErr(t, "v2 first contact without first-contact extension")
	case m.hasFCE() && (m.FCE.OSType > 15 || m.FCE.Release > 15):
		return b, encodeErr(t, "FCE OS type %d / release %d not in 0..15", m.FCE.OSType, m.FCE.Release)
	}
	h := Header{Eyecatcher: EyecatcherD, Type: t, Length: uint16(m.Len()),
		Version: m.Version, TypeV1: PathD}
	h.SetFlag(m.FirstContact)
	b = h.Append(b)
	b = binary.BigEndian.AppendUint64(b, m.GID)
	b = binary.BigEndian.AppendUint64(b, m.Token)
	b = append(b, m.DMBEIdx, m.DMBESize<<4, 0, 0)
	b = append(b, m.LinkID[:]...)
	if m.Version < V2 {
		b = append(b, make([]byte, 12)...)
		return append(b, EyecatcherD[:]...), nil
	}
	b = binary.BigEndian.AppendUint16(b, m.CHID)
	b = append(b, m.EID[:]...)
	b = binary.BigEndian.AppendUint64(b, m.GIDExt)
	if m.hasFCE() {
		b = m.FCE.append(b, 0, m.FCE.Release >= Release1)
	}
	return append(b, EyecatcherD[:]...), nil
}

// append appends the extension: its 36-byte base (smc_clc_first_contact_ext) with flags
// as its first byte, and with v2x the 16 bytes of the SMCv2.1 form after it
// (smc_clc_first_contact_ext_v2x).
func (f *FirstContactExt) append(b []byte, flags byte, v2x bool) []byte {
	b = append(b, flags, f.OSType<<4|f.Release, 0, 0)
	b = append(b, f.Hostname[:]...)
	if v2x {
		b = append(b, f.MaxConns, f.MaxLinks)
		b = binary.BigEndian.AppendUint16(b, f.FeatureMask)
		b = append(b, f.VendorOpts[:]...)
		b = append(b, make([]byte, 8)...)
	}
	return b
}

// parseFCE decodes the 36-byte base of a first-contact extension at the start of p
// (which holds at least FCELen bytes) and returns its flags byte.
func parseFCE(p []byte) (*FirstContactExt, byte) {
	f := &FirstContactExt{OSType: p[1] >> 4, Release: p[1] & 0x0f}
	copy(f.Hostname[:], p[4:FCELen])
	return f, p[0]
}

// parseV2x decodes the SMCv2.1 fields that follow the base (p holds at least 8 bytes).
func (f *FirstContactExt) parseV2x(p []byte) {
	f.MaxConns, f.MaxLinks = p[0], p[1]
	f.FeatureMask = binary.BigEndian.Uint16(p[2:4])
	copy(f.VendorOpts[:], p[4:8])
}

// ParseAcceptConfirm decodes a complete Accept or Confirm. Like
// smc_clc_msg_acc_conf_valid it requires typev1 R or D, exactly 48 bytes
// in v1 and at least 78 in v2 (bytes beyond the parts decoded here are
// ignored); a v2 first-contact message must also hold the whole
// first-contact extension for its release. An SMC-R message yields an error
// matching ErrModeUnsupported.
func ParseAcceptConfirm(msg []byte) (*AcceptConfirm, error) {
	h, err := parseFramed(msg, TypeAccept, AcceptConfirmLenV1, true)
	if err != nil {
		return nil, err
	}
	t := h.Type
	if err := acceptPath(h, len(msg), PathD); err != nil {
		return nil, err
	}
	m := &AcceptConfirm{Type: t, Version: h.Version, FirstContact: h.Flag()}
	if h.Version == V1 {
		if len(msg) != AcceptConfirmLenV1 {
			return nil, fieldErr(t, "length", len(msg), AcceptConfirmLenV1)
		}
	} else if len(msg) < AcceptConfirmLenV2 {
		return nil, fieldErr(t, "length", len(msg), ">= 78 (v2)")
	}
	m.GID = binary.BigEndian.Uint64(msg[8:16])
	m.Token = binary.BigEndian.Uint64(msg[16:24])
	m.DMBEIdx = msg[24]
	m.DMBESize = msg[25] >> 4
	copy(m.LinkID[:], msg[28:32])
	if h.Version == V1 {
		return m, nil
	}
	m.CHID = binary.BigEndian.Uint16(msg[32:34])
	copy(m.EID[:], msg[34:66])
	m.GIDExt = binary.BigEndian.Uint64(msg[66:74])
	if !m.FirstContact {
		return m, nil
	}
	body := len(msg) - TrailerLen
	if body < fceOffset+FCELen {
		return nil, fieldErr(t, "length", len(msg), ">= 114 (v2 first contact)")
	}
	f, _ := parseFCE(msg[fceOffset:])
	if f.Release >= Release1 {
		if body < fceOffset+FCEV2xLen {
			return nil, fieldErr(t, "length", len(msg), ">= 130 (v2.1 first contact)")
		}
		f.parseV2x(msg[fceOffset+FCELen:])
	}
	m.FCE = f
	return m, nil
}

// acceptPath checks that an Accept or Confirm of n bytes with header h has the layout
// want: it is nil for want, a *modeError for a well-formed message of the other layout
// (SMC-D or SMC-R, each at its own lengths, as smc_clc_msg_acc_conf_valid checks them),
// and a *FieldError otherwise.
func acceptPath(h Header, n int, want Path) error {
	t := h.Type
	var v1, v2 int
	var lens string
	switch h.TypeV1 {
	case want:
		return nil
	case PathD:
		v1, v2, lens = AcceptConfirmLenV1, AcceptConfirmLenV2, "48 (SMC-D v1) or >= 78 (SMC-D v2)"
	case PathR:
		v1, v2, lens = SMCRAcceptConfirmLenV1, SMCRAcceptConfirmLenV2, "68 (SMC-R v1) or >= 108 (SMC-R v2)"
	default:
		return fieldErr(t, "typev1", h.TypeV1, "R or D")
	}
	if (h.Version == V1 && n != v1) || (h.Version >= V2 && n < v2) {
		return fieldErr(t, "length", n, lens)
	}
	return &modeError{t: t, path: h.TypeV1}
}

// modeError reports a well-formed Accept or Confirm of a layout the parser
// called does not decode: SMC-R for ParseAcceptConfirm, SMC-D for
// ParseAcceptConfirmR.
type modeError struct {
	t    MsgType
	path Path // typev1 of the message
}

func (e *modeError) Error() string {
	name := "SMC-R"
	if e.path == PathD {
		name = "SMC-D"
	}
	return "clc: " + e.t.String() + ": " + name + " layout (typev1 " + e.path.String() + ") not supported"
}

func (e *modeError) Is(target error) bool { return target == ErrModeUnsupported }
