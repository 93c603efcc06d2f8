package clc

import "encoding/binary"

// SMC-R Accept (type 2) and Confirm (type 3) share one layout: the SMC-R half
// of struct smc_clc_msg_accept_confirm (smc_clc.h) — r0, struct
// smcr_clc_msg_accept_confirm, then in v2 r1 — as smc_clc_send_confirm_accept
// fills it (smc_clc.c). Multi-byte fields are big-endian:
//
//	off  size  field
//	  0     8  header: typev1 = R, 0x08 of byte 7 = first contact, EyecatcherR
//	  8     8  id_for_peer (the sender's system id)
//	 16    16  gid of the link's RoCE port
//	 32     6  mac of the link's RoCE port
//	 38     3  qpn: the link's queue-pair number
//	 41     4  rmb_rkey: rkey of the sender's RMB on this link
//	 45     1  rmbe_idx: Linux sends 1 (one RMBE per RMB)
//	 46     4  rmbe_alert_token: the sender's connection token
//	 50     1  bits 7..4 rmbe_size (compressed), bits 3..0 qp_mtu (IB MTU enum)
//	 51     1  reserved
//	 52     8  rmb_dma_addr: RMB address the peer RDMA-writes to
//	 60     1  reserved2
//	 61     3  psn: the queue pair's initial packet sequence number
//	 64        v1: trailer, length 68 (SMCR_CLC_ACCEPT_CONFIRM_LEN)
//	 64    32  v2: negotiated EID (r1.eid)
//	 96     8  v2: reserved (r1.reserved6)
//	104        v2 + first contact: struct smc_clc_first_contact_ext_v2x
//	 +0     1  bit 7 v2_direct: the peer is on the sender's subnet
//	 +1     1  bits 7..4 OS type, bits 3..0 SMC release
//	 +2     2  reserved
//	 +4    32  hostname (blank padded)
//	+36     1  max_conns
//	+37     1  max_links
//	+38     2  feature_mask
//	+40     4  vendor options
//	+44     8  reserved
//	           v2 + first contact, Confirm only: struct smc_clc_fce_gid_ext
//	+52     1  gid_cnt n (Linux: <= GID_LIST_SIZE 2)
//	+53     3  reserved
//	+56  16*n  RoCEv2 GIDs of the client's devices
//	end     4  trailer: EyecatcherR; v2 length 108 (SMCR_CLC_ACCEPT_CONFIRM_LEN_V2)
//	           + 52 with first contact, + 4 + 16n more in a first-contact Confirm
//
// smc_clc_fill_fce sends the 52-byte v2x form for SMC-R whatever the release;
// kernels before SMCv2.1 sent the 36-byte smc_clc_first_contact_ext in an
// Accept and, in a Confirm, 16 reserved bytes ahead of the GID list, which is
// the same bytes as the v2x form with its SMCv2.1 fields zero.
const (
	// FCERLen is the first-contact extension as an SMC-R sender lays it
	// out (struct smc_clc_first_contact_ext_v2x).
	FCERLen = FCEV2xLen
	// GIDListMax is GID_LIST_SIZE, the most RoCEv2 GIDs Linux lists in
	// a Confirm's GID list (struct smc_gidlist).
	GIDListMax = 2

	fceGIDExtLen = 4 // struct smc_clc_fce_gid_ext without its GIDs
	fceROffset   = SMCRAcceptConfirmLenV2 - TrailerLen
	maxQPN       = 1<<24 - 1
)

// AcceptConfirmR is an SMC-R Accept (sent by the server) or Confirm (sent by
// the client). EID, FCE and V2Direct exist in version 2 only; GIDList exists
// in a version 2 first-contact Confirm only. Fields of a part that is not
// encoded are ignored by Append and zero after parsing.
type AcceptConfirmR struct {
	Type         MsgType // TypeAccept or TypeConfirm
	Version      uint8   // 1 or 2
	FirstContact bool    // sender creates a new link group

	PeerID     [PeerIDLen]byte // id_for_peer
	GID        [GIDLen]byte    // GID of the sender's RoCE port
	MAC        [MACLen]byte    // MAC of the sender's RoCE port
	QPN        uint32          // queue-pair number, 24 bits
	RKey       uint32          // rmb_rkey
	RMBEIdx    uint8           // Linux always sends 1
	AlertToken uint32          // rmbe_alert_token
	RMBESize   uint8           // compressed size nibble 0..15, as on the wire
	QPMTU      uint8           // IB MTU enum nibble 0..15 (1 = 256 ... 5 = 4096)
	RMBAddr    uint64          // rmb_dma_addr
	PSN        uint32          // initial packet sequence number, 24 bits

	// v2.
	EID [EIDLen]byte

	// FCE is the first-contact extension: required in v2 when FirstContact
	// is set, ignored otherwise. It is always encoded in its 52-byte form.
	FCE *FirstContactExt
	// V2Direct is the extension's v2_direct bit: no gateway lies between
	// the peers (the kernel sends !lgr->uses_gateway).
	V2Direct bool
	// GIDList holds the RoCEv2 GIDs of a v2 first-contact Confirm, at most
	// GIDListMax.
	GIDList [][GIDLen]byte
}

var _ Message = (*AcceptConfirmR)(nil)

func (m *AcceptConfirmR) hasFCE() bool { return m.Version >= V2 && m.FirstContact }

func (m *AcceptConfirmR) hasGIDList() bool { return m.hasFCE() && m.Type == TypeConfirm }

// Len returns the encoded length, header and trailer included.
func (m *AcceptConfirmR) Len() int {
	if m.Version < V2 {
		return SMCRAcceptConfirmLenV1
	}
	n := SMCRAcceptConfirmLenV2
	if m.hasFCE() {
		n += FCERLen
	}
	if m.hasGIDList() {
		n += fceGIDExtLen + GIDLen*len(m.GIDList)
	}
	return n
}

// Append encodes m onto b as smc_clc_send_confirm_accept does for SMC-R. It
// fails, leaving b unchanged, if Type is not Accept or Confirm, a value does
// not fit its field, a v2 first-contact message has no FCE, or the GID list
// is longer than GIDListMax.
func (m *AcceptConfirmR) Append(b []byte) ([]byte, error) {
	t := m.Type
	switch {
	case t != TypeAccept && t != TypeConfirm:
		return b, encodeErr(t, "type %d is neither accept nor confirm", t)
	case m.Version < V1 || m.Version > 15:
		return b, encodeErr(t, "version %d not in 1..15", m.Version)
	case m.QPN > maxQPN || m.PSN > maxQPN:
		return b, encodeErr(t, "QPN %#x / PSN %#x above 24 bits", m.QPN, m.PSN)
	case m.RMBESize > 15 || m.QPMTU > 15:
		return b, encodeErr(t, "RMBE size %d / QP MTU %d not in 0..15", m.RMBESize, m.QPMTU)
	case m.hasFCE() && m.FCE == nil:
		return b, encodeErr(t, "v2 first contact without first-contact extension")
	case m.hasFCE() && (m.FCE.OSType > 15 || m.FCE.Release > 15):
		return b, encodeErr(t, "FCE OS type %d / release %d not in 0..15", m.FCE.OSType, m.FCE.Release)
	case m.hasGIDList() && len(m.GIDList) > GIDListMax:
		return b, encodeErr(t, "%d GIDs in the GID list, max %d", len(m.GIDList), GIDListMax)
	}
	h := Header{Eyecatcher: EyecatcherR, Type: t, Length: uint16(m.Len()),
		Version: m.Version, TypeV1: PathR}
	h.SetFlag(m.FirstContact)
	b = h.Append(b)
	b = append(b, m.PeerID[:]...)
	b = append(b, m.GID[:]...)
	b = append(b, m.MAC[:]...)
	b = appendUint24(b, m.QPN)
	b = binary.BigEndian.AppendUint32(b, m.RKey)
	b = append(b, m.RMBEIdx)
	b = binary.BigEndian.AppendUint32(b, m.AlertToken)
	b = append(b, m.RMBESize<<4|m.QPMTU, 0)
	b = binary.BigEndian.AppendUint64(b, m.RMBAddr)
	b = append(b, 0)
	b = appendUint24(b, m.PSN)
	if m.Version < V2 {
		return append(b, EyecatcherR[:]...), nil
	}
	b = append(b, m.EID[:]...)
	b = append(b, make([]byte, 8)...)
	if m.hasFCE() {
		var direct byte
		if m.V2Direct {
			direct = 0x80
		}
		b = m.FCE.append(b, direct, true)
	}
	if m.hasGIDList() {
		b = append(b, uint8(len(m.GIDList)), 0, 0, 0)
		for i := range m.GIDList {
			b = append(b, m.GIDList[i][:]...)
		}
	}
	return append(b, EyecatcherR[:]...), nil
}

// ParseAcceptConfirmR decodes a complete SMC-R Accept or Confirm. Like
// smc_clc_msg_acc_conf_valid it requires exactly 68 bytes in v1 and at least
// 108 in v2 (bytes beyond the parts decoded here are ignored). A v2
// first-contact message must hold the 52-byte first-contact extension, or
// the 36-byte form of kernels before SMCv2.1 in an Accept with release 0
// (decoded as the 52-byte form with its SMCv2.1 fields zero); a v2
// first-contact Confirm must also hold its GID list, at most GIDListMax
// entries (Linux always sends the list and does not read it back). An SMC-D
// message yields an error matching ErrModeUnsupported.
func ParseAcceptConfirmR(msg []byte) (*AcceptConfirmR, error) {
	h, err := parseFramed(msg, TypeAccept, AcceptConfirmLenV1, true)
	if err != nil {
		return nil, err
	}
	t := h.Type
	if err := acceptPath(h, len(msg), PathR); err != nil {
		return nil, err
	}
	if h.Version == V1 {
		if len(msg) != SMCRAcceptConfirmLenV1 {
			return nil, fieldErr(t, "length", len(msg), SMCRAcceptConfirmLenV1)
		}
	} else if len(msg) < SMCRAcceptConfirmLenV2 {
		return nil, fieldErr(t, "length", len(msg), ">= 108 (SMC-R v2)")
	}
	m := &AcceptConfirmR{Type: t, Version: h.Version, FirstContact: h.Flag()}
	copy(m.PeerID[:], msg[8:16])
	copy(m.GID[:], msg[16:32])
	copy(m.MAC[:], msg[32:38])
	m.QPN = uint24(msg[38:41])
	m.RKey = binary.BigEndian.Uint32(msg[41:45])
	m.RMBEIdx = msg[45]
	m.AlertToken = binary.BigEndian.Uint32(msg[46:50])
	m.RMBESize = msg[50] >> 4
	m.QPMTU = msg[50] & 0x0f
	m.RMBAddr = binary.BigEndian.Uint64(msg[52:60])
	m.PSN = uint24(msg[61:64])
	if h.Version == V1 {
		return m, nil
	}
	copy(m.EID[:], msg[64:96])
	if !m.FirstContact {
		return m, nil
	}
	if err := m.parseFCE(msg); err != nil {
		return nil, err
	}
	return m, nil
}

// parseFCE reads the first-contact extension and, in a Confirm, the GID list
// behind it.
func (m *AcceptConfirmR) parseFCE(msg []byte) error {
	t, x := m.Type, fceROffset
	body := len(msg) - TrailerLen
	if body < x+FCELen {
		return fieldErr(t, "length", len(msg), ">= 144 (SMC-R v2 first contact)")
	}
	f, flags := parseFCE(msg[x:])
	m.V2Direct = flags&0x80 != 0
	m.FCE = f
	if body < x+FCERLen {
		if t == TypeAccept && f.Release == Release0 {
			return nil // pre-SMCv2.1 Accept
		}
		return fieldErr(t, "length", len(msg), ">= 160 (SMC-R v2 first contact)")
	}
	f.parseV2x(msg[x+FCELen:])
	if t != TypeConfirm {
		return nil
	}
	x += FCERLen
	if body < x+fceGIDExtLen {
		return fieldErr(t, "length", len(msg), ">= 164 (SMC-R v2 first-contact confirm)")
	}
	n := int(msg[x])
	if n > GIDListMax {
		return fieldErr(t, "gid_cnt", n, "<= 2")
	}
	x += fceGIDExtLen
	if body < x+GIDLen*n {
		return fieldErr(t, "gid_cnt", n, "GIDs inside the message")
	}
	for i := 0; i < n; i++ {
		var g [GIDLen]byte
		copy(g[:], msg[x:x+GIDLen])
		m.GIDList = append(m.GIDList, g)
		x += GIDLen
	}
	return nil
}

// appendUint24 appends the low 24 bits of v big-endian (the kernel's hton24).
func appendUint24(b []byte, v uint32) []byte { return append(b, byte(v>>16), byte(v>>8), byte(v)) }

// uint24 decodes 3 big-endian bytes (ntoh24).
func uint24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }
