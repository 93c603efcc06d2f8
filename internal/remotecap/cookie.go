package remotecap

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"time"
)

// A cookie proves that an announcer received a datagram sent to its source IP: the
// listener hands it out in a Caps answer and only records an announcement that carries
// the cookie of its source IP. An off-path host that forges a source address never sees
// the cookie, so it cannot announce connections of another host. The cookie is stateless
// (an HMAC of the source IP and the time epoch under a secret of the listener instance),
// as a SYN cookie is.
const (
	// cookieEpoch is the period a cookie is issued for; one stays valid for the current
	// and the next epoch, so between cookieEpoch and twice it.
	cookieEpoch = 64 * time.Second
	// CapsTTL is how long a dialer may cache a Caps answer (and its cookie): less than
	// the shortest life of a cookie.
	CapsTTL = 60 * time.Second
)

type cookieJar struct{ secret [32]byte }

func newCookieJar() *cookieJar {
	j := &cookieJar{}
	rand.Read(j.secret[:]) // never fails (crypto/rand, Go 1.24+)
	return j
}

func (j *cookieJar) make(src netip.Addr, epoch uint64) uint64 {
	m := hmac.New(sha256.New, j.secret[:])
	a := src.Unmap().As16()
	m.Write(a[:])
	var e [8]byte
	binary.BigEndian.PutUint64(e[:], epoch)
	m.Write(e[:])
	sum := m.Sum(nil)
	return binary.BigEndian.Uint64(sum[:8]) | 1 // never 0: 0 means "no cookie"
}

func epochOf(now time.Time) uint64 { return uint64(now.UnixNano() / int64(cookieEpoch)) }

// issue returns the cookie of src now.
func (j *cookieJar) issue(src netip.Addr, now time.Time) uint64 { return j.make(src, epochOf(now)) }

// valid reports whether c is src's cookie of this epoch or the one before.
func (j *cookieJar) valid(src netip.Addr, c uint64, now time.Time) bool {
	e := epochOf(now)
	return c != 0 && (hmac.Equal(u64(c), u64(j.make(src, e))) || hmac.Equal(u64(c), u64(j.make(src, e-1))))
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
