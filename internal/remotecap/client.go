package remotecap

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// Caps is what a probe learnt of a listener.
type Caps struct {
	Flags    uint16        // capability bits (CapSMCRv2, ...)
	Instance uint64        // the listener instance that answered
	Cookie   uint64        // the cookie issued to our source IP
	RTT      time.Duration // the probe's round trip
}

// The dialer's waits. Every wait is bounded; what runs out of time is plain TCP.
const (
	// ProbeWait bounds one probe attempt; a probe makes two.
	ProbeWait = 250 * time.Millisecond
	// MinAckWait and MaxAckWait bound the wait for an announcement's acknowledgement,
	// otherwise AckRTTs probe round trips. The floor allows for a loaded listener host
	// (its responder goroutine scheduled late): an acknowledgement that misses the wait
	// turns the dial into plain TCP, and a wait that is too long only delays a dial to
	// a capable listener that has gone away.
	MinAckWait = 20 * time.Millisecond
	MaxAckWait = 100 * time.Millisecond
	AckRTTs    = 4
)

// AckWait is how long an announcement waits for its acknowledgement, given the
// destination's probe round trip.
func AckWait(rtt time.Duration) time.Duration {
	return min(max(AckRTTs*rtt, MinAckWait), MaxAckWait)
}

func nonce() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// Probe asks dst's UDP port whether an smcloop listener is there, in at most two
// attempts of ProbeWait (fewer if ctx ends sooner). ICMP port unreachable is ErrNotSMC,
// silence ErrNoAnswer.
func Probe(ctx context.Context, dst netip.AddrPort) (Caps, error) {
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		return Caps{}, err
	}
	defer conn.Close()
	var out [MsgLen]byte
	var last error = ErrNoAnswer
	for range 2 {
		n := nonce()
		start := time.Now()
		if _, err := conn.Write((&Msg{Type: TypeProbe, Nonce: n}).Append(out[:0])); err != nil {
			return Caps{}, classify(err)
		}
		m, err := await(ctx, conn, start.Add(ProbeWait), TypeCaps, n)
		if err == nil {
			return Caps{Flags: m.Flags, Instance: m.Instance, Cookie: m.Cookie, RTT: time.Since(start)}, nil
		}
		if last = err; !errors.Is(err, ErrNoAnswer) || ctx.Err() != nil {
			break
		}
	}
	return Caps{}, last
}

// Announcement is one connection to announce: from the local address the TCP socket is
// bound to (the IP may be unspecified: the route picks it, for the UDP datagram as for
// the SYN) to dst.
type Announcement struct {
	Local netip.AddrPort
	Dst   netip.AddrPort
	Caps  Caps // from the destination's probe
}

// Announce tells dst's listener that the connection from a.Local will speak CLC, and
// waits for its acknowledgement for AckWait(a.Caps.RTT) or until ctx ends. Only a nil
// error means the listener recorded it.
func Announce(ctx context.Context, a Announcement) error {
	var laddr *net.UDPAddr
	if a.Local.Addr().IsValid() && !a.Local.Addr().IsUnspecified() {
		laddr = &net.UDPAddr{IP: a.Local.Addr().AsSlice()}
	}
	conn, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(a.Dst))
	if err != nil {
		return err
	}
	defer conn.Close()
	n := nonce()
	start := time.Now()
	msg := Msg{Type: TypeAnnounce, Nonce: n, Instance: a.Caps.Instance, Cookie: a.Caps.Cookie,
		Server: netip.AddrPortFrom(a.Dst.Addr().Unmap(), a.Dst.Port()), ClientPort: a.Local.Port()}
	var out [MsgLen]byte
	if _, err := conn.Write(msg.Append(out[:0])); err != nil {
		return classify(err)
	}
	m, err := await(ctx, conn, start.Add(AckWait(a.Caps.RTT)), TypeAck, n)
	if err != nil {
		return err
	}
	if st := Status(m.Flags); st != StatusOK {
		return &RefusedError{Status: st}
	}
	return nil
}

// await reads from the connected socket until an answer of type want with nonce n, the
// deadline or ctx's end. Anything else is ignored: a forged or stale datagram costs
// nothing but its read.
func await(ctx context.Context, conn *net.UDPConn, deadline time.Time, want Type, n uint64) (Msg, error) {
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetReadDeadline(deadline)
	if done := ctx.Done(); done != nil {
		stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	var in [MsgLen + 1]byte
	for {
		k, err := conn.Read(in[:])
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return Msg{}, ErrNoAnswer
			}
			return Msg{}, classify(err)
		}
		m, err := Parse(in[:k])
		if err == nil && m.Type == want && m.Nonce == n {
			return m, nil
		}
	}
}

func classify(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return ErrNotSMC
	}
	return err
}
