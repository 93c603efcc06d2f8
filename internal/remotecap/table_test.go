package remotecap

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func tuple(client string, port uint16) Tuple {
	return Tuple{Client: netip.AddrPortFrom(netip.MustParseAddr(client), port), Server: netip.MustParseAddrPort("10.0.0.1:5000")}
}

// TestTableTakeOnce: an announcement is taken once, by its exact 4-tuple.
func TestTableTakeOnce(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := NewTable(8, 4, time.Second)
	require.True(t, tb.Add(tuple("10.0.0.2", 40000), 77, now))
	_, ok := tb.Take(tuple("10.0.0.2", 40001), now)
	assert.False(t, ok, "another client port")
	_, ok = tb.Take(tuple("10.0.0.3", 40000), now)
	assert.False(t, ok, "another client IP")
	other := tuple("10.0.0.2", 40000)
	other.Server = netip.MustParseAddrPort("10.0.0.1:5001")
	_, ok = tb.Take(other, now)
	assert.False(t, ok, "another server port")
	// An IPv4-mapped address (a dual-stack listener's view) is the same tuple.
	mapped := Tuple{Client: netip.MustParseAddrPort("[::ffff:10.0.0.2]:40000"), Server: netip.MustParseAddrPort("[::ffff:10.0.0.1]:5000")}
	n, ok := tb.Take(mapped, now)
	assert.True(t, ok)
	assert.Equal(t, uint64(77), n)
	_, ok = tb.Take(tuple("10.0.0.2", 40000), now)
	assert.False(t, ok, "taken already")
	total, _ := tb.Len(netip.Addr{}, now)
	assert.Zero(t, total)
}

// TestTableExpiry: an announcement lives ttl; expired ones free their source's share.
func TestTableExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := NewTable(8, 2, time.Second)
	src := netip.MustParseAddr("10.0.0.2")
	require.True(t, tb.Add(tuple("10.0.0.2", 1), 1, now))
	require.True(t, tb.Add(tuple("10.0.0.2", 2), 2, now.Add(500*time.Millisecond)))
	assert.False(t, tb.Add(tuple("10.0.0.2", 3), 3, now.Add(500*time.Millisecond)), "the source's share is full")
	_, ok := tb.Take(tuple("10.0.0.2", 1), now.Add(time.Second))
	assert.False(t, ok, "expired at exactly ttl")
	total, fromSrc := tb.Len(src, now.Add(time.Second))
	assert.Equal(t, 1, total)
	assert.Equal(t, 1, fromSrc)
	require.True(t, tb.Add(tuple("10.0.0.2", 3), 3, now.Add(time.Second)), "the expired one's share is free")
	n, ok := tb.Take(tuple("10.0.0.2", 2), now.Add(1499*time.Millisecond))
	assert.True(t, ok)
	assert.Equal(t, uint64(2), n)
	total, _ = tb.Len(src, now.Add(10*time.Second))
	assert.Zero(t, total)
}

// TestTableBounds: a flood of announcements from many sources fills the table to max and
// no further; one source never holds more than its share; a replaced announcement does
// not count twice; many announcements taken before they expire keep the bookkeeping
// bounded.
func TestTableBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := NewTable(64, 16, time.Minute)
	added := 0
	for s := range 10 {
		for p := range 100 {
			if tb.Add(tuple(netip.AddrFrom4([4]byte{10, 1, 0, byte(s)}).String(), uint16(p+1)), 1, now) {
				added++
			}
		}
	}
	assert.Equal(t, 64, added, "max")
	_, fromOne := tb.Len(netip.MustParseAddr("10.1.0.0"), now)
	assert.Equal(t, 16, fromOne, "perSource")
	assert.True(t, tb.Add(tuple("10.1.0.0", 1), 2, now), "the same tuple again replaces")
	total, fromOne := tb.Len(netip.MustParseAddr("10.1.0.0"), now)
	assert.Equal(t, 64, total)
	assert.Equal(t, 16, fromOne)

	tb = NewTable(4, 4, time.Minute)
	for i := range 10000 {
		tu := tuple("10.0.0.9", uint16(i%60000+1))
		require.True(t, tb.Add(tu, 1, now))
		_, ok := tb.Take(tu, now)
		require.True(t, ok)
	}
	assert.LessOrEqual(t, len(tb.order)-tb.head, 2*4+1, "the order list stays bounded")
	assert.LessOrEqual(t, len(tb.order), 2*4+1+130, "and its consumed front is compacted")
}
