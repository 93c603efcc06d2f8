package remotecap

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Responder is the listener's half of the signal: a UDP socket on the TCP listener's
// address and port number that answers probes with the listener's capabilities and
// records announced connections in a Table, from which the accept path takes them.
type Responder struct {
	conn     *net.UDPConn
	addr     netip.AddrPort // the TCP listener's address: port to match, and the IP unless a wildcard
	caps     uint16
	instance uint64
	jar      *cookieJar
	table    *Table
	now      func() time.Time

	withdrawn atomic.Bool
	probes    atomic.Int32 // announcements still let through while withdrawn (LimitHandshake's probe)

	probesAnswered, announced, refused, dropped, taken atomic.Uint64

	wg   sync.WaitGroup
	once sync.Once
}

// ResponderStats are a responder's counters.
type ResponderStats struct {
	Probes    uint64 // probes answered
	Announced uint64 // announcements recorded (acknowledged with StatusOK)
	Refused   uint64 // announcements refused (bad cookie, other instance, full, withdrawn)
	Dropped   uint64 // datagrams dropped: malformed, not for a listener, or over the rate limit
	Taken     uint64 // accepted connections that had been announced
	Held      int    // announcements held now
}

// ResponderConfig configures Listen.
type ResponderConfig struct {
	// Caps are the capability bits a probe is answered with (CapSMCRv2, ...).
	Caps uint16
	// Now is the clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// Listen binds UDP on addr (the TCP listener's address and port) and answers there until
// Close. A bind that fails (the UDP port is taken) is returned as is; the caller then
// offers no cross-host signal.
func Listen(addr netip.AddrPort, cfg ResponderConfig) (*Responder, error) {
	network := "udp"
	if addr.Addr().Is4() {
		network = "udp4"
	}
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, err
	}
	bound := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	r := &Responder{
		conn: conn, addr: netip.AddrPortFrom(bound.Addr().Unmap(), bound.Port()), caps: cfg.Caps, jar: newCookieJar(),
		table: NewTable(MaxAnnounced, MaxPerSource, AnnounceTTL), now: cfg.Now,
	}
	if r.now == nil {
		r.now = time.Now
	}
	var id [8]byte
	rand.Read(id[:])
	r.instance = binary.BigEndian.Uint64(id[:]) | 1
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// Addr returns the UDP address the responder answers on.
func (r *Responder) Addr() netip.AddrPort { return r.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// Instance returns the responder's instance id, random per Listen.
func (r *Responder) Instance() uint64 { return r.instance }

// Take removes the announcement of the accepted connection from client to local and
// reports whether there was one: then the client is an smcloop dialer that will speak
// CLC first.
func (r *Responder) Take(client, local netip.AddrPort) bool {
	_, ok := r.table.Take(Tuple{Client: client, Server: local}, r.now())
	if ok {
		r.taken.Add(1)
	}
	return ok
}

// Withdraw refuses announcements (StatusWithdrawn) until Restore: LimitHandshake.
func (r *Responder) Withdraw() { r.probes.Store(0); r.withdrawn.Store(true) }

// Restore accepts announcements again.
func (r *Responder) Restore() { r.probes.Store(0); r.withdrawn.Store(false) }

// Probe lets n more announcements through while withdrawn.
func (r *Responder) Probe(n uint32) { r.probes.Store(int32(min(n, 1<<30))); r.withdrawn.Store(true) }

// Stats returns the counters.
func (r *Responder) Stats() ResponderStats {
	held, _ := r.table.Len(netip.Addr{}, r.now())
	return ResponderStats{
		Probes: r.probesAnswered.Load(), Announced: r.announced.Load(), Refused: r.refused.Load(),
		Dropped: r.dropped.Load(), Taken: r.taken.Load(), Held: held,
	}
}

// Close stops answering, closes the socket and waits for the serving goroutine.
func (r *Responder) Close() error {
	var err error
	r.once.Do(func() {
		err = r.conn.Close()
		r.wg.Wait()
	})
	return err
}

func (r *Responder) serve() {
	defer r.wg.Done()
	var lim limiter
	var in [MsgLen + 1]byte // one more: a longer datagram is refused, not truncated to fit
	var out [MsgLen]byte
	for {
		n, src, err := r.conn.ReadFromUDPAddrPort(in[:])
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // ICMP errors of earlier answers, ENOMEM...: keep serving
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		reply, ok := r.answer(in[:n], src, &lim)
		if !ok {
			r.dropped.Add(1)
			continue
		}
		r.conn.WriteToUDPAddrPort(reply.Append(out[:0]), src)
	}
}

// answer handles one datagram from src: the answer to send, or false to drop it.
func (r *Responder) answer(b []byte, src netip.AddrPort, lim *limiter) (Msg, bool) {
	m, err := Parse(b)
	if err != nil || src.Port() == 0 || !src.Addr().IsValid() {
		return Msg{}, false
	}
	now := r.now()
	switch m.Type {
	case TypeProbe:
		if !lim.allow(src.Addr(), now) {
			return Msg{}, false
		}
		r.probesAnswered.Add(1)
		return Msg{Type: TypeCaps, Flags: r.caps, Nonce: m.Nonce, Instance: r.instance,
			Cookie: r.jar.issue(src.Addr(), now), TTL: uint16(CapsTTL / time.Second)}, true
	case TypeAnnounce:
		st := r.record(m, src, now)
		if st != StatusOK {
			r.refused.Add(1)
			if !lim.allow(src.Addr(), now) {
				return Msg{}, false // refusals are answers too: rate-limited
			}
		} else {
			r.announced.Add(1)
		}
		return Msg{Type: TypeAck, Flags: uint16(st), Nonce: m.Nonce, Instance: r.instance,
			TTL: uint16(AnnounceTTL / time.Millisecond)}, true
	}
	return Msg{}, false // a Caps or an Ack sent to a listener: not ours to answer
}

// record checks an announcement and adds it to the table.
func (r *Responder) record(m Msg, src netip.AddrPort, now time.Time) Status {
	switch {
	case !r.jar.valid(src.Addr(), m.Cookie, now):
		return StatusBadCookie
	case m.Instance != r.instance:
		return StatusInstance
	case m.Server.Port() != r.addr.Port(),
		!r.addr.Addr().IsUnspecified() && m.Server.Addr() != r.addr.Addr().Unmap(),
		r.addr.Addr().Is4() && !m.Server.Addr().Is4():
		return StatusMismatch
	}
	if r.withdrawn.Load() {
		if r.probes.Add(-1) < 0 {
			r.probes.Store(0)
			return StatusWithdrawn
		}
	}
	if !r.table.Add(Tuple{Client: netip.AddrPortFrom(src.Addr(), m.ClientPort), Server: m.Server}, m.Nonce, now) {
		return StatusFull
	}
	return StatusOK
}
