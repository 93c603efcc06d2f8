package remotecap

import (
	"net/netip"
	"sync"
	"time"
)

// The listener's bounds on announcements: what any number of lying or flooding sources
// can make it hold.
const (
	// MaxAnnounced bounds the announcements a listener holds at once.
	MaxAnnounced = 4096
	// MaxPerSource bounds those of one source IP, so that one host cannot take the table.
	MaxPerSource = 256
	// AnnounceTTL is how long an announcement waits for its connection. The connection
	// follows the acknowledgement at once; the margin covers SYN retransmissions and
	// a kernel accept queue that waits while the listener's backlog is full.
	AnnounceTTL = 10 * time.Second
)

// Tuple is a TCP connection as the listener sees it.
type Tuple struct {
	Client netip.AddrPort // the remote address of the accepted connection
	Server netip.AddrPort // its local address
}

func (t Tuple) norm() Tuple {
	return Tuple{
		Client: netip.AddrPortFrom(t.Client.Addr().Unmap(), t.Client.Port()),
		Server: netip.AddrPortFrom(t.Server.Addr().Unmap(), t.Server.Port()),
	}
}

// Table holds announced connections until their connection is accepted or they expire.
// It is bounded in total (max) and per source IP (perSource); its zero value is not
// usable, use NewTable.
type Table struct {
	max, perSource int
	ttl            time.Duration

	mu      sync.Mutex
	entries map[Tuple]tableEntry
	order   []orderItem // entries in the order they expire (every one lives ttl)
	head    int
	sources map[netip.Addr]int
	seq     uint64
}

type tableEntry struct {
	nonce   uint64
	expires time.Time
	seq     uint64
}

type orderItem struct {
	t   Tuple
	seq uint64
}

// NewTable returns a table holding at most max announcements, perSource of one source IP,
// each for ttl.
func NewTable(max, perSource int, ttl time.Duration) *Table {
	return &Table{max: max, perSource: perSource, ttl: ttl, entries: make(map[Tuple]tableEntry), sources: make(map[netip.Addr]int)}
}

// Add records an announcement at now. It fails (false) when the table or the source's
// share is full. A second announcement of the same tuple replaces the first.
func (t *Table) Add(tu Tuple, nonce uint64, now time.Time) bool {
	tu = tu.norm()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	if old, ok := t.entries[tu]; ok {
		t.entries[tu] = tableEntry{nonce: nonce, expires: old.expires, seq: old.seq}
		return true
	}
	src := tu.Client.Addr()
	if len(t.entries) >= t.max || t.sources[src] >= t.perSource {
		return false
	}
	t.seq++
	t.entries[tu] = tableEntry{nonce: nonce, expires: now.Add(t.ttl), seq: t.seq}
	if len(t.order)-t.head >= 2*t.max {
		t.compactLocked() // many taken before they expired: keep the order list bounded
	}
	t.order = append(t.order, orderItem{tu, t.seq})
	t.sources[src]++
	return true
}

// Take removes the announcement of tu and reports whether there was one, unexpired at
// now, and its nonce.
func (t *Table) Take(tu Tuple, now time.Time) (nonce uint64, ok bool) {
	tu = tu.norm()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	e, ok := t.entries[tu]
	if !ok {
		return 0, false
	}
	t.removeLocked(tu)
	return e.nonce, true
}

// Len returns the number of announcements held, and of those from src.
func (t *Table) Len(src netip.Addr, now time.Time) (total, fromSrc int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	return len(t.entries), t.sources[src.Unmap()]
}

func (t *Table) removeLocked(tu Tuple) {
	delete(t.entries, tu)
	src := tu.Client.Addr()
	if t.sources[src]--; t.sources[src] <= 0 {
		delete(t.sources, src)
	}
}

// expireLocked drops the announcements that expired by now. They expire in the order
// they were made, so this looks only at the oldest; taken ones are skipped as found.
func (t *Table) expireLocked(now time.Time) {
	for t.head < len(t.order) {
		it := t.order[t.head]
		e, ok := t.entries[it.t]
		if ok && e.seq == it.seq && now.Before(e.expires) {
			break
		}
		if ok && e.seq == it.seq {
			t.removeLocked(it.t)
		}
		t.order[t.head] = orderItem{}
		t.head++
	}
	// Compact once the consumed front is most of the slice.
	if t.head > 64 && t.head*2 > len(t.order) {
		n := copy(t.order, t.order[t.head:])
		clear(t.order[n:])
		t.order = t.order[:n]
		t.head = 0
	}
}

// compactLocked drops the order items of taken or replaced announcements, leaving at
// most max.
func (t *Table) compactLocked() {
	n := 0
	for _, it := range t.order[t.head:] {
		if e, ok := t.entries[it.t]; ok && e.seq == it.seq {
			t.order[n] = it
			n++
		}
	}
	clear(t.order[n:])
	t.order = t.order[:n]
	t.head = 0
}
