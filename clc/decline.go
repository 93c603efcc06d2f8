package clc

import "encoding/binary"

// Decline layout: struct smc_clc_msg_decline (v1) and
// struct smc_clc_msg_decline_v2 (smc_clc.h; SMC-REFERENCE §1.5):
//
//	off  size  field
//	  0     8  header: type 4, EyecatcherR, version = that of the
//	           handshake, 0x08 of byte 7 = out of sync
//	  8     8  sender peer ID (zeros unless SMC-R with a valid system id)
//	 16     4  peer_diagnosis: SMC_CLC_DECL_* code
//	 20     1  bits 7..4 OS type (Linux: 0 in v1, 2 in v2), bits 3..0 reserved
//	 21     3  reserved
//	 24    16  v2 only: four additional diagnosis codes (peer_diagnosis_v2)
//	end     4  trailer (not checked on receipt)
const (
	DeclineLenV1 = 28 // sizeof(struct smc_clc_msg_decline)
	DeclineLenV2 = 44 // sizeof(struct smc_clc_msg_decline_v2)
)

// Decline is the CLC Decline (type 4), which either peer may send instead
// of its next handshake message to make both sides fall back to TCP.
type Decline struct {
	Version   uint8 // 1 or 2; decides the length
	OutOfSync bool  // header flag 0x08, sent with DeclSyncErr
	PeerID    [PeerIDLen]byte
	Code      uint32    // SMC_CLC_DECL_* reason (peer_diagnosis)
	OSType    uint8     // 0..15; OSLinux in v2
	AddDiag   [4]uint32 // v2 only
}

// NewDecline returns the Decline Linux would send for code in a handshake of
// the given version: OS type Linux in v2, the out-of-sync flag with
// DeclSyncErr, no peer ID (this implementation has no RoCE system id).
func NewDecline(code uint32, version uint8) *Decline {
	d := &Decline{Version: version, Code: code, OutOfSync: code == DeclSyncErr}
	if version >= V2 {
		d.OSType = OSLinux
	}
	return d
}

// Err returns the Decline as a received-from-peer *DeclineError.
func (d *Decline) Err() *DeclineError { return &DeclineError{Code: d.Code, Peer: true} }

// Len returns DeclineLenV1 for version 0 or 1 and DeclineLenV2 otherwise.
func (d *Decline) Len() int {
	if d.Version >= V2 {
		return DeclineLenV2
	}
	return DeclineLenV1
}

// Append encodes d onto b as smc_clc_send_decline does. A Decline cannot
// be invalid: Version 0 is sent as 1, a Version above 15 as 15, and OSType
// is truncated to its 4 bits.
func (d *Decline) Append(b []byte) []byte {
	v := min(max(d.Version, V1), 15)
	h := Header{Eyecatcher: EyecatcherR, Type: TypeDecline, Length: uint16(d.Len()), Version: v, TypeV1: PathR}
	h.SetFlag(d.OutOfSync)
	b = h.Append(b)
	b = append(b, d.PeerID[:]...)
	b = binary.BigEndian.AppendUint32(b, d.Code)
	b = append(b, d.OSType<<4, 0, 0, 0)
	if v >= V2 {
		for _, c := range d.AddDiag {
			b = binary.BigEndian.AppendUint32(b, c)
		}
	}
	return append(b, EyecatcherR[:]...)
}

// ParseDecline decodes a complete Decline. As smc_clc_msg_decl_valid it
// requires exactly DeclineLenV1 bytes in v1 and DeclineLenV2 otherwise;
// as smc_clc_msg_hdr_valid it does not check the trailer.
func ParseDecline(msg []byte) (*Decline, error) {
	h, err := parseFramed(msg, TypeDecline, DeclineLenV1, false)
	if err != nil {
		return nil, err
	}
	want := DeclineLenV1
	if h.Version >= V2 {
		want = DeclineLenV2
	}
	if len(msg) != want {
		return nil, fieldErr(TypeDecline, "length", len(msg), want)
	}
	d := &Decline{Version: h.Version, OutOfSync: h.Flag()}
	copy(d.PeerID[:], msg[8:16])
	d.Code = binary.BigEndian.Uint32(msg[16:20])
	d.OSType = msg[20] >> 4
	if h.Version >= V2 {
		for i := range d.AddDiag {
			d.AddDiag[i] = binary.BigEndian.Uint32(msg[24+4*i:])
		}
	}
	return d, nil
}
