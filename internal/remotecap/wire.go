package remotecap

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// The datagram layout. Every message, in both directions, is exactly MsgLen bytes, so an
// answer is never larger than what asked for it (no amplification), and a parser reads
// fixed offsets only. Multi-byte fields are big-endian, as in CLC.
//
//	off len field
//	  0   4 magic      Magic ("SMCc")
//	  4   1 version    Version
//	  5   1 type       TypeProbe, TypeCaps, TypeAnnounce, TypeAck
//	  6   2 flags      Caps: capability bits (CapSMCRv2, ...); Ack: the Status; else 0
//	  8   8 nonce      chosen by the dialer, echoed by the listener
//	 16   8 instance   Caps, Ack: the listener's instance id; Announce: the one it expects
//	 24   8 cookie     Caps: the cookie issued to the source IP; Announce: that cookie
//	 32  16 server IP  Announce: the TCP destination address (IPv4 as ::ffff:a.b.c.d)
//	 48   2 server port  Announce: the TCP destination port
//	 50   2 client port  Announce: the TCP source port, bound before connect
//	 52   2 ttl        Caps: seconds the answer may be cached; Ack: ms the announcement is kept
//	 54  10 reserved   zero
const (
	MsgLen  = 64
	Magic   = 0x534d4363 // "SMCc"
	Version = 1
)

const (
	offMagic      = 0
	offVersion    = 4
	offType       = 5
	offFlags      = 6
	offNonce      = 8
	offInstance   = 16
	offCookie     = 24
	offServerIP   = 32
	offServerPort = 48
	offClientPort = 50
	offTTL        = 52
	offReserved   = 54
)

// Type is a message's type.
type Type uint8

// The message types.
const (
	TypeProbe    Type = 1 // dialer → listener: are you an smcloop listener, what can you do?
	TypeCaps     Type = 2 // listener → dialer: the capabilities, a cookie for the source IP
	TypeAnnounce Type = 3 // dialer → listener: the next connection from this port speaks CLC
	TypeAck      Type = 4 // listener → dialer: the announcement's Status
)

func (t Type) String() string {
	switch t {
	case TypeProbe:
		return "probe"
	case TypeCaps:
		return "caps"
	case TypeAnnounce:
		return "announce"
	case TypeAck:
		return "ack"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Capability bits of a Caps message.
const (
	CapSMCRv2 uint16 = 1 << 0 // the listener offers SMC-R v2 (RoCE v2, routable)
	CapSMCRv1 uint16 = 1 << 1 // the listener offers SMC-R v1
)

// Status is an Ack's verdict on an announcement.
type Status uint16

// The statuses of an Ack. Anything but StatusOK means the connection must be plain TCP.
const (
	StatusOK        Status = 0 // recorded: the listener expects CLC from this connection
	StatusBadCookie Status = 1 // the cookie is not one issued to this source IP (or expired): probe again
	StatusInstance  Status = 2 // another listener instance holds the port now: probe again
	StatusFull      Status = 3 // the table or the source's share of it is full
	StatusWithdrawn Status = 4 // the listener withdrew its signal (LimitHandshake)
	StatusMismatch  Status = 5 // the announcement names an address or port the listener does not serve
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusBadCookie:
		return "bad cookie"
	case StatusInstance:
		return "other instance"
	case StatusFull:
		return "table full"
	case StatusWithdrawn:
		return "withdrawn"
	case StatusMismatch:
		return "not this listener"
	}
	return fmt.Sprintf("status(%d)", uint16(s))
}

// Msg is one datagram. Fields a type does not use must be zero.
type Msg struct {
	Type       Type
	Flags      uint16 // Caps: capability bits; Ack: a Status
	Nonce      uint64
	Instance   uint64
	Cookie     uint64
	Server     netip.AddrPort // Announce only
	ClientPort uint16         // Announce only
	TTL        uint16         // Caps: seconds; Ack: milliseconds
}

// Append encodes m onto b.
func (m *Msg) Append(b []byte) []byte {
	var w [MsgLen]byte
	binary.BigEndian.PutUint32(w[offMagic:], Magic)
	w[offVersion] = Version
	w[offType] = byte(m.Type)
	binary.BigEndian.PutUint16(w[offFlags:], m.Flags)
	binary.BigEndian.PutUint64(w[offNonce:], m.Nonce)
	binary.BigEndian.PutUint64(w[offInstance:], m.Instance)
	binary.BigEndian.PutUint64(w[offCookie:], m.Cookie)
	if m.Server.IsValid() {
		ip := m.Server.Addr().As16() // an IPv4 address becomes ::ffff:a.b.c.d
		copy(w[offServerIP:], ip[:])
		binary.BigEndian.PutUint16(w[offServerPort:], m.Server.Port())
	}
	binary.BigEndian.PutUint16(w[offClientPort:], m.ClientPort)
	binary.BigEndian.PutUint16(w[offTTL:], m.TTL)
	return append(b, w[:]...)
}

// WireError is a datagram that Parse refuses: anything received is untrusted input, and
// such a datagram is dropped unanswered.
type WireError struct {
	Field string // the field that is wrong
	Got   uint64
	Want  string
}

func (e *WireError) Error() string {
	return fmt.Sprintf("remotecap: bad datagram: %s is %#x, want %s", e.Field, e.Got, e.Want)
}

// Is makes every WireError match ErrMalformed.
func (e *WireError) Is(target error) bool { return target == ErrMalformed }

// Parse decodes a datagram. It accepts exactly MsgLen bytes with this magic and version,
// a known type, zero reserved bytes and zero in every field the type does not use, so
// that a later version can give them meaning.
func Parse(b []byte) (Msg, error) {
	if len(b) != MsgLen {
		return Msg{}, &WireError{Field: "length", Got: uint64(len(b)), Want: fmt.Sprint(MsgLen)}
	}
	if v := binary.BigEndian.Uint32(b[offMagic:]); v != Magic {
		return Msg{}, &WireError{Field: "magic", Got: uint64(v), Want: fmt.Sprintf("%#x", Magic)}
	}
	if v := b[offVersion]; v != Version {
		return Msg{}, &WireError{Field: "version", Got: uint64(v), Want: fmt.Sprint(Version)}
	}
	for i := offReserved; i < MsgLen; i++ {
		if b[i] != 0 {
			return Msg{}, &WireError{Field: fmt.Sprintf("reserved byte %d", i), Got: uint64(b[i]), Want: "0"}
		}
	}
	m := Msg{
		Type:       Type(b[offType]),
		Flags:      binary.BigEndian.Uint16(b[offFlags:]),
		Nonce:      binary.BigEndian.Uint64(b[offNonce:]),
		Instance:   binary.BigEndian.Uint64(b[offInstance:]),
		Cookie:     binary.BigEndian.Uint64(b[offCookie:]),
		ClientPort: binary.BigEndian.Uint16(b[offClientPort:]),
		TTL:        binary.BigEndian.Uint16(b[offTTL:]),
	}
	raw := [16]byte(b[offServerIP : offServerIP+16])
	ip := netip.AddrFrom16(raw).Unmap()
	sport := binary.BigEndian.Uint16(b[offServerPort:])
	zero := func(field string, v uint64) error {
		if v != 0 {
			return &WireError{Field: field, Got: v, Want: "0 in a " + m.Type.String()}
		}
		return nil
	}
	var err error
	switch m.Type {
	case TypeProbe:
		err = firstErr(zero("flags", uint64(m.Flags)), zero("instance", m.Instance), zero("cookie", m.Cookie),
			zero("server address", addrBits(raw)), zero("server port", uint64(sport)), zero("client port", uint64(m.ClientPort)), zero("ttl", uint64(m.TTL)))
	case TypeCaps:
		err = firstErr(zero("server address", addrBits(raw)), zero("server port", uint64(sport)), zero("client port", uint64(m.ClientPort)))
	case TypeAnnounce:
		err = firstErr(zero("flags", uint64(m.Flags)), zero("ttl", uint64(m.TTL)))
		if err == nil && (sport == 0 || m.ClientPort == 0 || ip.IsUnspecified()) {
			err = &WireError{Field: "announced 4-tuple", Got: uint64(m.ClientPort), Want: "a server address, a server port and a client port"}
		}
		m.Server = netip.AddrPortFrom(ip, sport)
	case TypeAck:
		err = firstErr(zero("cookie", m.Cookie), zero("server address", addrBits(raw)), zero("server port", uint64(sport)), zero("client port", uint64(m.ClientPort)))
	default:
		err = &WireError{Field: "type", Got: uint64(m.Type), Want: "1..4"}
	}
	if err != nil {
		return Msg{}, err
	}
	return m, nil
}

// addrBits is nonzero unless every byte of the address field is: the field as sent, not
// the address it names, since ::ffff:0.0.0.0 names the unspecified address too and would
// not re-encode to the same bytes.
func addrBits(raw [16]byte) uint64 {
	return binary.BigEndian.Uint64(raw[:8]) | binary.BigEndian.Uint64(raw[8:])
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
