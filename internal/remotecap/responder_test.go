package remotecap

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// newTestResponder is a responder for the answer function only (no socket).
func newTestResponder(addr string, clock *fakeClock) *Responder {
	return &Responder{addr: netip.MustParseAddrPort(addr), caps: CapSMCRv2, instance: 42, jar: newCookieJar(),
		table: NewTable(MaxAnnounced, MaxPerSource, AnnounceTTL), now: clock.now}
}

func probeMsg(n uint64) []byte { return (&Msg{Type: TypeProbe, Nonce: n}).Append(nil) }

func announceMsg(n, instance, cookie uint64, server string, cport uint16) []byte {
	return (&Msg{Type: TypeAnnounce, Nonce: n, Instance: instance, Cookie: cookie, Server: netip.MustParseAddrPort(server), ClientPort: cport}).Append(nil)
}

// TestResponderAnswers: a probe gets the caps and a cookie; an announcement with that
// cookie is recorded, acknowledged and taken once by the accepted connection.
func TestResponderAnswers(t *testing.T) {
	clock := &fakeClock{time.Unix(1e6, 0)}
	r := newTestResponder("10.0.0.1:5000", clock)
	src := netip.MustParseAddrPort("10.0.0.2:33333")
	var lim limiter
	caps, ok := r.answer(probeMsg(5), src, &lim)
	require.True(t, ok)
	assert.Equal(t, Msg{Type: TypeCaps, Flags: CapSMCRv2, Nonce: 5, Instance: 42, Cookie: r.jar.issue(src.Addr(), clock.t), TTL: 60}, caps)
	ack, ok := r.answer(announceMsg(6, 42, caps.Cookie, "10.0.0.1:5000", 40000), src, &lim)
	require.True(t, ok)
	assert.Equal(t, Msg{Type: TypeAck, Flags: uint16(StatusOK), Nonce: 6, Instance: 42, TTL: 10000}, ack)
	assert.False(t, r.Take(netip.MustParseAddrPort("10.0.0.2:40001"), netip.MustParseAddrPort("10.0.0.1:5000")))
	assert.True(t, r.Take(netip.MustParseAddrPort("10.0.0.2:40000"), netip.MustParseAddrPort("10.0.0.1:5000")))
	assert.False(t, r.Take(netip.MustParseAddrPort("10.0.0.2:40000"), netip.MustParseAddrPort("10.0.0.1:5000")), "once")
	// The cookie lasts at least CapsTTL, and not past two epochs.
	clock.t = clock.t.Add(CapsTTL)
	ack, _ = r.answer(announceMsg(7, 42, caps.Cookie, "10.0.0.1:5000", 40002), src, &lim)
	assert.Equal(t, StatusOK, Status(ack.Flags))
	clock.t = clock.t.Add(2 * cookieEpoch)
	ack, _ = r.answer(announceMsg(8, 42, caps.Cookie, "10.0.0.1:5000", 40003), src, &lim)
	assert.Equal(t, StatusBadCookie, Status(ack.Flags))
}

// TestResponderLies: announcements that lie are refused, and cost the liar nothing but
// its own connection's SMC: a forged source (the cookie of another IP), a guessed
// cookie, another instance's id, a port or address the listener does not serve, and
// datagrams that are not requests are dropped unanswered.
func TestResponderLies(t *testing.T) {
	clock := &fakeClock{time.Unix(1e6, 0)}
	r := newTestResponder("10.0.0.1:5000", clock)
	var lim limiter
	victim := netip.MustParseAddrPort("10.0.0.2:33333")
	attacker := netip.MustParseAddrPort("10.0.0.66:33333")
	caps, _ := r.answer(probeMsg(1), attacker, &lim)
	for _, tc := range []struct {
		name string
		src  netip.AddrPort
		msg  []byte
		want Status
	}{
		{"the attacker's cookie from the victim's address", victim, announceMsg(2, 42, caps.Cookie, "10.0.0.1:5000", 40000), StatusBadCookie},
		{"no cookie", victim, announceMsg(2, 42, 0, "10.0.0.1:5000", 40000), StatusBadCookie},
		{"a guessed cookie", victim, announceMsg(2, 42, 0x123456789, "10.0.0.1:5000", 40000), StatusBadCookie},
		{"another instance", attacker, announceMsg(2, 41, caps.Cookie, "10.0.0.1:5000", 40000), StatusInstance},
		{"another port", attacker, announceMsg(2, 42, caps.Cookie, "10.0.0.1:5001", 40000), StatusMismatch},
		{"another address", attacker, announceMsg(2, 42, caps.Cookie, "10.0.0.7:5000", 40000), StatusMismatch},
		{"IPv6 to an IPv4 listener", attacker, announceMsg(2, 42, caps.Cookie, "[fd00::1]:5000", 40000), StatusMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack, ok := r.answer(tc.msg, tc.src, &lim)
			require.True(t, ok)
			assert.Equal(t, tc.want, Status(ack.Flags))
		})
	}
	assert.Zero(t, r.Stats().Held, "nothing recorded")
	for _, b := range [][]byte{
		caps.Append(nil), // a Caps sent to a listener
		(&Msg{Type: TypeAck, Nonce: 1}).Append(nil),
		probeMsg(1)[:10],
		append(probeMsg(1), 0),
	} {
		_, ok := r.answer(b, attacker, &lim)
		assert.False(t, ok)
	}
	_, ok := r.answer(probeMsg(1), netip.AddrPortFrom(attacker.Addr(), 0), &lim)
	assert.False(t, ok, "source port 0")
}

// TestResponderFlood: a source that floods probes gets at most its burst and then its
// rate; other sources are still answered; a source that floods announcements holds at
// most MaxPerSource of the table, and the table at most MaxAnnounced in all.
func TestResponderFlood(t *testing.T) {
	clock := &fakeClock{time.Unix(1e6, 0)}
	r := newTestResponder("0.0.0.0:5000", clock)
	var lim limiter
	flooder := netip.MustParseAddrPort("10.0.0.66:1")
	answered := 0
	for i := range 1000 {
		if _, ok := r.answer(probeMsg(uint64(i)), flooder, &lim); ok {
			answered++
		}
	}
	assert.Equal(t, sourceBurst, answered)
	clock.t = clock.t.Add(time.Second)
	answered = 0
	for i := range 1000 {
		if _, ok := r.answer(probeMsg(uint64(i)), flooder, &lim); ok {
			answered++
		}
	}
	assert.Equal(t, sourceRate, answered, "a second later: the rate")
	_, ok := r.answer(probeMsg(1), netip.MustParseAddrPort("10.0.0.2:1"), &lim)
	assert.True(t, ok, "another source is answered")

	clock.t = clock.t.Add(time.Second) // the flooder's bucket refills: refusals are answers too
	cookie := r.jar.issue(flooder.Addr(), clock.t)
	full := 0
	for p := range 1000 {
		ack, ok := r.answer(announceMsg(1, 42, cookie, "10.0.0.1:5000", uint16(p+1)), flooder, &lim)
		if ok && Status(ack.Flags) == StatusFull {
			full++
		}
	}
	_, fromFlooder := r.table.Len(flooder.Addr(), clock.t)
	assert.Equal(t, MaxPerSource, fromFlooder)
	assert.Equal(t, sourceBurst, full, "refusals are answered, rate-limited")
	// Many sources (each with its own cookie) fill the table to its bound.
	for s := range 40 {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, 0, byte(s)}), 1)
		c := r.jar.issue(src.Addr(), clock.t)
		for p := range MaxPerSource {
			r.answer(announceMsg(1, 42, c, "10.0.0.1:5000", uint16(p+1)), src, &lim)
		}
	}
	assert.Equal(t, MaxAnnounced, r.Stats().Held)
	clock.t = clock.t.Add(AnnounceTTL)
	assert.Zero(t, r.Stats().Held, "all expire")
}

// TestResponderWithdrawn: LimitHandshake's states: withdrawn refuses, a probe lets n
// through, restore accepts again.
func TestResponderWithdrawn(t *testing.T) {
	clock := &fakeClock{time.Unix(1e6, 0)}
	r := newTestResponder("10.0.0.1:5000", clock)
	var lim limiter
	src := netip.MustParseAddrPort("10.0.0.2:1")
	cookie := r.jar.issue(src.Addr(), clock.t)
	status := func(port uint16) Status {
		ack, ok := r.answer(announceMsg(1, 42, cookie, "10.0.0.1:5000", port), src, &lim)
		require.True(t, ok)
		return Status(ack.Flags)
	}
	r.Withdraw()
	assert.Equal(t, StatusWithdrawn, status(1))
	r.Probe(1)
	assert.Equal(t, StatusOK, status(2))
	assert.Equal(t, StatusWithdrawn, status(3))
	r.Restore()
	assert.Equal(t, StatusOK, status(4))
}

// TestProbeAnnounceLoopback: the whole exchange over real sockets: probe, announce,
// take; a port with no responder is ErrNotSMC; a responder that does not answer costs
// the announcement AckWait, then ErrNoAnswer.
func TestProbeAnnounceLoopback(t *testing.T) {
	r, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), ResponderConfig{Caps: CapSMCRv2})
	require.NoError(t, err)
	defer r.Close()
	dst := r.Addr()
	ctx := context.Background()
	caps, err := Probe(ctx, dst)
	require.NoError(t, err)
	assert.Equal(t, CapSMCRv2, caps.Flags)
	assert.Equal(t, r.Instance(), caps.Instance)
	assert.Positive(t, caps.RTT)
	local := netip.MustParseAddrPort("127.0.0.1:45678")
	require.NoError(t, Announce(ctx, Announcement{Local: local, Dst: dst, Caps: caps}))
	assert.True(t, r.Take(local, dst))
	err = Announce(ctx, Announcement{Local: local, Dst: dst, Caps: Caps{Instance: caps.Instance, Cookie: caps.Cookie + 2}})
	var re *RefusedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, StatusBadCookie, re.Status)

	// A closed port: ICMP port unreachable.
	u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	closed := u.LocalAddr().(*net.UDPAddr).AddrPort()
	require.NoError(t, u.Close())
	_, err = Probe(ctx, closed)
	assert.ErrorIs(t, err, ErrNotSMC)

	// A silent port: a socket that reads nothing.
	silent, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer silent.Close()
	start := time.Now()
	err = Announce(ctx, Announcement{Local: local, Dst: silent.LocalAddr().(*net.UDPAddr).AddrPort(), Caps: caps})
	assert.ErrorIs(t, err, ErrNoAnswer)
	assert.GreaterOrEqual(t, time.Since(start), AckWait(caps.RTT))
	assert.Less(t, time.Since(start), MaxAckWait+time.Second)
	require.NoError(t, r.Close())
	assert.Equal(t, uint64(1), r.Stats().Taken)
}

// TestCache: unknown at first, with one background probe; its answer is cached; a
// failed announcement forgets it; a probe that finds no listener caches NotCapable; the
// cache stays bounded.
func TestCache(t *testing.T) {
	clock := &fakeClock{time.Unix(1e6, 0)}
	var probes atomic.Int64
	answers := map[netip.AddrPort]error{}
	// The first probe waits for gate, so that the second Lookup finds it in flight
	// whatever the scheduler does; every later probe finds gate closed.
	gate := make(chan struct{})
	c := &Cache{Now: clock.now, ProbeFunc: func(_ context.Context, dst netip.AddrPort) (Caps, error) {
		probes.Add(1)
		<-gate
		if err := answers[dst]; err != nil {
			return Caps{}, err
		}
		return Caps{Flags: CapSMCRv2, Instance: 9, Cookie: 3, RTT: time.Millisecond}, nil
	}}
	smc := netip.MustParseAddrPort("10.0.0.1:80")
	plain := netip.MustParseAddrPort("10.0.0.1:81")
	answers[plain] = ErrNotSMC
	st, _ := c.Lookup(smc)
	assert.Equal(t, Unknown, st)
	st, _ = c.Lookup(smc)
	assert.Equal(t, Unknown, st, "probe in flight; no second probe within ProbeInterval")
	close(gate)
	c.Wait()
	assert.Equal(t, int64(1), probes.Load())
	st, caps := c.Lookup(smc)
	assert.Equal(t, Capable, st)
	assert.Equal(t, uint64(9), caps.Instance)
	c.Forget(smc)
	st, _ = c.Lookup(smc)
	assert.Equal(t, Unknown, st)
	c.Wait()
	assert.Equal(t, int64(1), probes.Load(), "rate-limited: probed less than ProbeInterval ago")
	clock.t = clock.t.Add(ProbeInterval)
	c.Lookup(smc)
	c.Wait()
	assert.Equal(t, int64(2), probes.Load())

	c.Lookup(plain)
	c.Wait()
	st, _ = c.Lookup(plain)
	assert.Equal(t, NotCapable, st)
	clock.t = clock.t.Add(NotCapableTTL)
	st, _ = c.Lookup(plain)
	assert.Equal(t, Unknown, st, "expired")
	c.Wait()

	for i := range 3 * MaxCached {
		c.Lookup(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 1))
	}
	c.Wait()
	c.mu.Lock()
	n := len(c.entries)
	c.mu.Unlock()
	assert.LessOrEqual(t, n, MaxCached)
}
