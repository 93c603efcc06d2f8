package clc

import (
	"encoding/binary"
	"strconv"
)

// Proposal layout: struct smc_clc_msg_proposal_area (smc_clc.h;
// SMC-REFERENCE §1.3). Parts after the fixed 40 bytes are located through
// the offsets they carry; Linux, and Append, lay them out back to back:
//
//	off  size  field (struct smc_clc_msg_proposal)
//	  0     8  header: type 1, EyecatcherR
//	  8     8  peer ID (id_for_peer)            - SMC-R v1
//	 16    16  RoCE GID                         - SMC-R v1
//	 32     6  RoCE MAC                         - SMC-R v1
//	 38     2  iparea_offset: prefix area at 40+iparea_offset (40 or 0)
//	           (struct smc_clc_msg_smcd, 40 bytes; always in v2, in v1 only
//	           when typev1 offers SMC-D)
//	 40     8  ISM GID of the v1 ISM device
//	 48     2  ISM CHID
//	 50     2  v2_ext_offset: v2 extension at 52+v2_ext_offset; 0 = none
//	 52    28  vendor OUI (3), vendor options (5), reserved (20)
//	           (struct smc_clc_msg_proposal_prefix, iff typev1 != N)
//	 +0     4  IPv4 subnet (address & mask)
//	 +4     1  IPv4 prefix length
//	 +5     2  reserved
//	 +7     1  ipv6_prefixes_cnt n (<= 8)
//	 +8  17*n  IPv6 prefixes: 16-byte prefix + 1-byte length each
//	           (struct smc_clc_v2_extension, iff v2 and typev2 != N)
//	 +0     1  eid_cnt k (<= 8)
//	 +1     1  ism_gid_cnt m (<= 8)
//	 +2     1  reserved
//	 +3     1  bits 7..4 SMC release, bit 0 SEID present
//	 +4     2  reserved
//	 +6     2  smcd_v2_ext_offset: SMC-Dv2 extension at +8+offset
//	 +8    16  RoCEv2 GID
//	+24     1  max_conns
//	+25     1  max_links
//	+26     2  feature_mask
//	+28    12  reserved
//	+40  32*k  user EIDs
//	           (struct smc_clc_smcd_v2_extension, iff v2 and typev2 has D)
//	 +0    32  system EID
//	+32    16  reserved
//	+48  10*m  ISMv2 GID (8) + CHID (2) entries
//	end     4  trailer: EyecatcherR
const (
	propBaseLen    = 40 // struct smc_clc_msg_proposal
	smcdAreaLen    = 40 // struct smc_clc_msg_smcd
	prefixAreaLen  = 8  // struct smc_clc_msg_proposal_prefix
	ipv6PrefixLen  = 17 // struct smc_clc_ipv6_prefix
	v2ExtLen       = 40 // struct smc_clc_v2_extension_fixed
	smcdV2ExtLen   = 48 // struct smc_clc_smcd_v2_extension_fixed
	gidCHIDLen     = 10 // struct smc_clc_smcd_gid_chid
	v2ExtOffsetEnd = 52 // offsetofend(smc_clc_msg_smcd, v2_ext_offset) from message start

	// maxV2ExtOffset and maxSMCDV2ExtOffset are the kernel's bounds
	// (smc_get_clc_v2_ext, smc_get_clc_smcd_v2_ext): the distance from
	// the offset field to where the part starts in a maximal proposal.
	maxV2ExtOffset     = 172
	maxSMCDV2ExtOffset = 288

	// MinProposalLen is the shortest valid Proposal: v1, SMC-R only,
	// no SMC-D area, no IPv6 prefixes.
	MinProposalLen = propBaseLen + prefixAreaLen + TrailerLen
)

// IPv6Prefix is one entry of the prefix list (struct smc_clc_ipv6_prefix).
type IPv6Prefix struct {
	Prefix [16]byte
	Len    uint8
}

// GIDCHID is one entry of the ISMv2 list (struct smc_clc_smcd_gid_chid).
type GIDCHID struct {
	GID  uint64
	CHID uint16
}

// ISMDevice is an ISM device offered in a Proposal's ISMv2 list. GIDExt is
// the low 64 bits of the 128-bit GID of an Emulated-ISM device, 0 for a
// native one.
type ISMDevice struct {
	GID, GIDExt uint64
	CHID        uint16
}

// Proposal is the CLC Proposal (type 1) sent by the client. Which parts are
// encoded depends on Version and the offered paths:
//
//   - the SMC-D area (ISMGID, ISMCHID) in v2 always, in v1 iff TypeV1 offers
//     SMC-D; ISMGID and ISMCHID are encoded and decoded only when TypeV1
//     offers SMC-D (they are zero on the wire otherwise, as Linux sends);
//   - the prefix area (IPv4*, IPv6Prefixes) iff TypeV1 != PathN;
//   - the v2 extension (Release ... FeatureMask, UEIDs) iff Version >= 2 and
//     TypeV2 != PathN;
//   - the SMC-Dv2 extension (SEID, ISMv2) iff Version >= 2 and TypeV2 offers
//     SMC-D.
//
// Fields of a part that is not encoded are ignored by Append and zero after
// ParseProposal. Empty lists decode as nil.
type Proposal struct {
	Version        uint8 // 1 or 2; Linux sends 2
	TypeV1, TypeV2 Path  // paths offered for v1 and for v2

	// SMC-R v1 (zeros for SMC-D only).
	PeerID  [PeerIDLen]byte
	RoCEGID [16]byte
	RoCEMAC [6]byte

	// v1 ISM device.
	ISMGID  uint64
	ISMCHID uint16

	// Prefix area.
	IPv4Subnet    [4]byte
	IPv4PrefixLen uint8
	IPv6Prefixes  []IPv6Prefix // at most MaxIPv6Prefixes

	// v2 extension.
	Release     uint8 // 0..15; Release1 = SMCv2.1
	SEIDPresent bool
	UEIDs       [][EIDLen]byte // at most MaxUEIDs
	RoCEv2GID   [16]byte
	MaxConns    uint8
	MaxLinks    uint8
	FeatureMask uint16

	// SMC-Dv2 extension.
	SEID  [EIDLen]byte
	ISMv2 []GIDCHID // at most MaxV2GIDEntries
}

func (p *Proposal) hasSMCDArea() bool  { return p.Version >= V2 || p.TypeV1.HasD() }
func (p *Proposal) hasPrefix() bool    { return p.TypeV1 != PathN }
func (p *Proposal) hasV2Ext() bool     { return p.Version >= V2 && p.TypeV2 != PathN }
func (p *Proposal) hasSMCDV2Ext() bool { return p.Version >= V2 && p.TypeV2.HasD() }

func (p *Proposal) prefixLen() int { return prefixAreaLen + ipv6PrefixLen*len(p.IPv6Prefixes) }

// Len returns the encoded length, header and trailer included.
func (p *Proposal) Len() int {
	n := propBaseLen + TrailerLen
	if p.hasSMCDArea() {
		n += smcdAreaLen
	}
	if p.hasPrefix() {
		n += p.prefixLen()
	}
	if p.hasV2Ext() {
		n += v2ExtLen + EIDLen*len(p.UEIDs)
	}
	if p.hasSMCDV2Ext() {
		n += smcdV2ExtLen + gidCHIDLen*len(p.ISMv2)
	}
	return n
}

func (p *Proposal) check() error {
	switch {
	case p.Version < V1 || p.Version > 15:
		return encodeErr(TypeProposal, "version %d not in 1..15", p.Version)
	case p.TypeV1 > PathB || p.TypeV2 > PathB:
		return encodeErr(TypeProposal, "paths %d/%d out of range", p.TypeV1, p.TypeV2)
	case p.Version == V1 && p.TypeV1 == PathN:
		return encodeErr(TypeProposal, "v1 proposal offering no v1 path")
	case p.hasPrefix() && len(p.IPv6Prefixes) > MaxIPv6Prefixes:
		return encodeErr(TypeProposal, "%d IPv6 prefixes, max %d", len(p.IPv6Prefixes), MaxIPv6Prefixes)
	case p.hasV2Ext() && len(p.UEIDs) > MaxUEIDs:
		return encodeErr(TypeProposal, "%d UEIDs, max %d", len(p.UEIDs), MaxUEIDs)
	case p.hasV2Ext() && p.Release > 15:
		return encodeErr(TypeProposal, "release %d not in 0..15", p.Release)
	case p.hasSMCDV2Ext() && len(p.ISMv2) > MaxV2GIDEntries:
		return encodeErr(TypeProposal, "%d ISMv2 entries, max %d", len(p.ISMv2), MaxV2GIDEntries)
	}
	return nil
}

// Append encodes p onto b the way smc_clc_send_proposal lays it out. It
// fails, leaving b unchanged, if a list exceeds its maximum or a value does
// not fit its field.
func (p *Proposal) Append(b []byte) ([]byte, error) {
	if err := p.check(); err != nil {
		return b, err
	}
	h := Header{Eyecatcher: EyecatcherR, Type: TypeProposal, Length: uint16(p.Len()),
		Version: p.Version, TypeV1: p.TypeV1, TypeV2: p.TypeV2}
	b = h.Append(b)
	b = append(b, p.PeerID[:]...)
	b = append(b, p.RoCEGID[:]...)
	b = append(b, p.RoCEMAC[:]...)
	ipAreaOffset := 0
	if p.hasPrefix() && p.hasSMCDArea() {
		ipAreaOffset = smcdAreaLen
	}
	b = binary.BigEndian.AppendUint16(b, uint16(ipAreaOffset))

	if p.hasSMCDArea() {
		var gid uint64
		var chid uint16
		if p.TypeV1.HasD() {
			gid, chid = p.ISMGID, p.ISMCHID
		}
		b = binary.BigEndian.AppendUint64(b, gid)
		b = binary.BigEndian.AppendUint16(b, chid)
		v2ExtOffset := 0
		if p.hasV2Ext() {
			v2ExtOffset = propBaseLen + smcdAreaLen - v2ExtOffsetEnd
			if p.hasPrefix() {
				v2ExtOffset += p.prefixLen()
			}
		}
		b = binary.BigEndian.AppendUint16(b, uint16(v2ExtOffset))
		b = append(b, make([]byte, smcdAreaLen-12)...) // OUI, vendor options, reserved
	}

	if p.hasPrefix() {
		b = append(b, p.IPv4Subnet[:]...)
		b = append(b, p.IPv4PrefixLen, 0, 0, uint8(len(p.IPv6Prefixes)))
		for _, pf := range p.IPv6Prefixes {
			b = append(b, pf.Prefix[:]...)
			b = append(b, pf.Len)
		}
	}

	if p.hasV2Ext() {
		ismCnt, smcdOffset := 0, 0
		if p.hasSMCDV2Ext() {
			ismCnt = len(p.ISMv2)
			smcdOffset = v2ExtLen - 8 + EIDLen*len(p.UEIDs)
		}
		flag := p.Release << 4
		if p.SEIDPresent {
			flag |= 1
		}
		b = append(b, uint8(len(p.UEIDs)), uint8(ismCnt), 0, flag, 0, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(smcdOffset))
		b = append(b, p.RoCEv2GID[:]...)
		b = append(b, p.MaxConns, p.MaxLinks)
		b = binary.BigEndian.AppendUint16(b, p.FeatureMask)
		b = append(b, make([]byte, 12)...)
		for i := range p.UEIDs {
			b = append(b, p.UEIDs[i][:]...)
		}
	}

	if p.hasSMCDV2Ext() {
		b = append(b, p.SEID[:]...)
		b = append(b, make([]byte, 16)...)
		for _, e := range p.ISMv2 {
			b = binary.BigEndian.AppendUint64(b, e.GID)
			b = binary.BigEndian.AppendUint16(b, e.CHID)
		}
	}
	return append(b, EyecatcherR[:]...), nil
}

// AddISMDevice appends a device to the ISMv2 list following the kernel's
// rule: a native device takes one entry, an Emulated-ISM device (see
// [EmulatedCHID]) two, (gid, chid) then (gidExt, chid), and is left out if
// fewer than two slots remain. It reports whether the device was added.
func (p *Proposal) AddISMDevice(gid, gidExt uint64, chid uint16) bool {
	need := 1
	if EmulatedCHID(chid) {
		need = 2
	}
	if len(p.ISMv2)+need > MaxV2GIDEntries {
		return false
	}
	p.ISMv2 = append(p.ISMv2, GIDCHID{GID: gid, CHID: chid})
	if need == 2 {
		p.ISMv2 = append(p.ISMv2, GIDCHID{GID: gidExt, CHID: chid})
	}
	return true
}

// ISMDevices decodes the ISMv2 list into devices as the server does
// (smc_find_ism_v2_device_serv): an Emulated-ISM entry must be followed by
// a second entry with the same CHID carrying the GID extension; an entry
// that breaks this rule is skipped.
func (p *Proposal) ISMDevices() []ISMDevice {
	var devs []ISMDevice
	for i := 0; i < len(p.ISMv2); i++ {
		e := p.ISMv2[i]
		d := ISMDevice{GID: e.GID, CHID: e.CHID}
		if EmulatedCHID(e.CHID) {
			if i+1 == len(p.ISMv2) || p.ISMv2[i+1].CHID != e.CHID {
				continue
			}
			i++
			d.GIDExt = p.ISMv2[i].GID
		}
		devs = append(devs, d)
	}
	return devs
}

// ParseProposal decodes a complete Proposal (header through trailer). It
// enforces smc_clc_msg_prop_valid: the eyecatchers, the counts' maxima, the
// offsets' kernel bounds and the exact total length, which is
//
//	v1: 40 + iparea_offset + 8 + 17n + 4
//	v2: 40 + 40 + (8 + 17n if typev1 != N) + (40 + 32k if typev2 != N)
//	    + (48 + 10m if typev2 has D) + 4
//
// Every part is read where its offset points, after checking that it lies
// inside the message.
func ParseProposal(msg []byte) (*Proposal, error) {
	h, err := parseFramed(msg, TypeProposal, MinProposalLen, true)
	if err != nil {
		return nil, err
	}
	p := &Proposal{Version: h.Version, TypeV1: h.TypeV1, TypeV2: h.TypeV2}
	copy(p.PeerID[:], msg[8:16])
	copy(p.RoCEGID[:], msg[16:32])
	copy(p.RoCEMAC[:], msg[32:38])
	ipAreaOffset := int(binary.BigEndian.Uint16(msg[38:40]))
	if ipAreaOffset > smcdAreaLen {
		return nil, fieldErr(TypeProposal, "iparea_offset", ipAreaOffset, "<= 40")
	}
	if h.Version == V1 {
		err = p.parseV1(msg, ipAreaOffset)
	} else {
		err = p.parseV2(msg, ipAreaOffset)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// span checks that n bytes at off lie inside the message body (before the
// trailer).
func span(msg []byte, off, n int, field string) error {
	if off+n > len(msg)-TrailerLen {
		return fieldErr(TypeProposal, field, off+n, "<= "+strconv.Itoa(len(msg)-TrailerLen)+" (inside message)")
	}
	return nil
}

// parseSMCDArea reads the v1 ISM device; SMC-D in typev1 requires the
// SMC-D area right behind the base (smc_get_clc_msg_smcd).
func (p *Proposal) parseSMCDArea(msg []byte, ipAreaOffset int) error {
	if !p.TypeV1.HasD() {
		return nil
	}
	if ipAreaOffset != smcdAreaLen {
		return fieldErr(TypeProposal, "iparea_offset", ipAreaOffset, "40 (typev1 offers SMC-D)")
	}
	if err := span(msg, propBaseLen, 10, "smcd area"); err != nil {
		return err
	}
	p.ISMGID = binary.BigEndian.Uint64(msg[40:48])
	p.ISMCHID = binary.BigEndian.Uint16(msg[48:50])
	return nil
}

// parsePrefix reads the prefix area at off and returns its length.
func (p *Proposal) parsePrefix(msg []byte, off int) (int, error) {
	if err := span(msg, off, prefixAreaLen, "iparea_offset"); err != nil {
		return 0, err
	}
	copy(p.IPv4Subnet[:], msg[off:off+4])
	p.IPv4PrefixLen = msg[off+4]
	n := int(msg[off+7])
	if n > MaxIPv6Prefixes {
		return 0, fieldErr(TypeProposal, "ipv6_prefixes_cnt", n, "<= 8")
	}
	off += prefixAreaLen
	if err := span(msg, off, ipv6PrefixLen*n, "ipv6_prefixes_cnt"); err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		var pf IPv6Prefix
		copy(pf.Prefix[:], msg[off:off+16])
		pf.Len = msg[off+16]
		p.IPv6Prefixes = append(p.IPv6Prefixes, pf)
		off += ipv6PrefixLen
	}
	return prefixAreaLen + ipv6PrefixLen*n, nil
}

func (p *Proposal) parseV1(msg []byte, ipAreaOffset int) error {
	if p.TypeV1 == PathN {
		return fieldErr(TypeProposal, "typev1", p.TypeV1, "R, D or B in a v1 proposal")
	}
	if err := p.parseSMCDArea(msg, ipAreaOffset); err != nil {
		return err
	}
	n, err := p.parsePrefix(msg, propBaseLen+ipAreaOffset)
	if err != nil {
		return err
	}
	if want := propBaseLen + ipAreaOffset + n + TrailerLen; len(msg) != want {
		return fieldErr(TypeProposal, "length", len(msg), want)
	}
	return nil
}

func (p *Proposal) parseV2(msg []byte, ipAreaOffset int) error {
	want := propBaseLen + smcdAreaLen + TrailerLen
	if len(msg) < want {
		return fieldErr(TypeProposal, "length", len(msg), ">= "+strconv.Itoa(want)+" (v2)")
	}
	if err := p.parseSMCDArea(msg, ipAreaOffset); err != nil {
		return err
	}
	if p.hasPrefix() {
		n, err := p.parsePrefix(msg, propBaseLen+ipAreaOffset)
		if err != nil {
			return err
		}
		want += n
	}
	if p.TypeV2 != PathN {
		n, err := p.parseV2Ext(msg)
		if err != nil {
			return err
		}
		want += n
	}
	if len(msg) != want {
		return fieldErr(TypeProposal, "length", len(msg), want)
	}
	return nil
}

// parseV2Ext reads the v2 extension and, if typev2 offers SMC-D, the
// SMC-Dv2 extension; it returns their combined length.
func (p *Proposal) parseV2Ext(msg []byte) (int, error) {
	v2Offset := int(binary.BigEndian.Uint16(msg[50:52]))
	if v2Offset == 0 || v2Offset > maxV2ExtOffset {
		return 0, fieldErr(TypeProposal, "v2_ext_offset", v2Offset, "1..172")
	}
	x := v2ExtOffsetEnd + v2Offset
	if err := span(msg, x, v2ExtLen, "v2_ext_offset"); err != nil {
		return 0, err
	}
	k, m := int(msg[x]), int(msg[x+1])
	if k > MaxUEIDs {
		return 0, fieldErr(TypeProposal, "eid_cnt", k, "<= 8")
	}
	p.Release = msg[x+3] >> 4
	p.SEIDPresent = msg[x+3]&1 != 0
	copy(p.RoCEv2GID[:], msg[x+8:x+24])
	p.MaxConns = msg[x+24]
	p.MaxLinks = msg[x+25]
	p.FeatureMask = binary.BigEndian.Uint16(msg[x+26 : x+28])
	if err := span(msg, x+v2ExtLen, EIDLen*k, "eid_cnt"); err != nil {
		return 0, err
	}
	if k > 0 {
		p.UEIDs = make([][EIDLen]byte, 0, k)
	}
	for i := 0; i < k; i++ {
		var eid [EIDLen]byte
		off := x + v2ExtLen + EIDLen*i
		copy(eid[:], msg[off:off+EIDLen])
		p.UEIDs = append(p.UEIDs, eid)
	}
	total := v2ExtLen + EIDLen*k
	if !p.TypeV2.HasD() {
		return total, nil
	}

	if m > MaxV2GIDEntries {
		return 0, fieldErr(TypeProposal, "ism_gid_cnt", m, "<= 8")
	}
	dOffset := int(binary.BigEndian.Uint16(msg[x+6 : x+8]))
	if dOffset == 0 || dOffset > maxSMCDV2ExtOffset {
		return 0, fieldErr(TypeProposal, "smcd_v2_ext_offset", dOffset, "1..288")
	}
	y := x + 8 + dOffset
	if err := span(msg, y, smcdV2ExtLen+gidCHIDLen*m, "smcd_v2_ext_offset"); err != nil {
		return 0, err
	}
	copy(p.SEID[:], msg[y:y+EIDLen])
	if m > 0 {
		p.ISMv2 = make([]GIDCHID, 0, m)
	}
	for i := 0; i < m; i++ {
		off := y + smcdV2ExtLen + gidCHIDLen*i
		p.ISMv2 = append(p.ISMv2, GIDCHID{
			GID:  binary.BigEndian.Uint64(msg[off : off+8]),
			CHID: binary.BigEndian.Uint16(msg[off+8 : off+10]),
		})
	}
	return total + smcdV2ExtLen + gidCHIDLen*m, nil
}
