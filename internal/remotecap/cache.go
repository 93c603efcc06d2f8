package remotecap

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"
)

// State is what a dialer knows of a destination.
type State uint8

// The states of a destination.
const (
	Unknown    State = iota // never probed, or the last answer expired or failed: dial plain, probe
	Capable                 // an smcloop listener answered: announce, then speak CLC
	NotCapable              // nothing answered: dial plain until the entry expires
)

func (s State) String() string {
	return [...]string{"unknown", "capable", "not capable"}[s]
}

// The dialer's bounds.
const (
	// MaxCached bounds the destinations a Cache remembers.
	MaxCached = 1024
	// NotCapableTTL is how long a destination that did not answer is dialed plain
	// without a new probe.
	NotCapableTTL = 30 * time.Second
	// ProbeInterval is the least time between two probes of one destination.
	ProbeInterval = time.Second
	// MaxProbing bounds the probes in flight of a Cache.
	MaxProbing = 16
)

// Cache is a dialer's per-destination knowledge (IP, port) → State, bounded in size,
// with background probes that are rate-limited per destination and in number.
type Cache struct {
	// Probe is the probe function; nil means Probe. Tests set it before use.
	ProbeFunc func(ctx context.Context, dst netip.AddrPort) (Caps, error)
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	entries map[netip.AddrPort]*cacheEntry
	probing int
	wg      sync.WaitGroup
}

type cacheEntry struct {
	state     State
	caps      Caps
	expires   time.Time // of Capable and NotCapable
	lastProbe time.Time
	inflight  bool
}

// Default is the process's cache: Dial's.
var Default = &Cache{}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Lookup returns what is known of dst. On Unknown it starts a background probe unless
// one is in flight, dst was probed less than ProbeInterval ago or MaxProbing run; it
// never waits for one.
func (c *Cache) Lookup(dst netip.AddrPort) (State, Caps) {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = make(map[netip.AddrPort]*cacheEntry)
	}
	e := c.entries[dst]
	if e != nil && e.state != Unknown && now.Before(e.expires) {
		return e.state, e.caps
	}
	if e == nil {
		if len(c.entries) >= MaxCached {
			c.evictLocked(now)
		}
		e = &cacheEntry{}
		c.entries[dst] = e
	}
	e.state = Unknown
	if !e.inflight && c.probing < MaxProbing && (e.lastProbe.IsZero() || now.Sub(e.lastProbe) >= ProbeInterval) {
		e.inflight, e.lastProbe = true, now
		c.probing++
		c.wg.Add(1)
		go c.probe(dst, e)
	}
	return Unknown, Caps{}
}

func (c *Cache) probe(dst netip.AddrPort, e *cacheEntry) {
	defer c.wg.Done()
	fn := c.ProbeFunc
	if fn == nil {
		fn = Probe
	}
	caps, err := fn(context.Background(), dst)
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probing--
	e.inflight = false
	switch {
	case err == nil && caps.Flags&(CapSMCRv2|CapSMCRv1) != 0:
		e.state, e.caps, e.expires = Capable, caps, now.Add(CapsTTL)
	case err == nil, errors.Is(err, ErrNotSMC), errors.Is(err, ErrNoAnswer):
		e.state, e.caps, e.expires = NotCapable, Caps{}, now.Add(NotCapableTTL)
	default:
		e.state = Unknown // a local error (no route...): a later dial probes again
	}
}

// Forget makes dst Unknown: its announcement timed out or was refused. The next dial
// probes again (rate-limited by ProbeInterval).
func (c *Cache) Forget(dst netip.AddrPort) {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[dst]; e != nil {
		e.state, e.caps = Unknown, Caps{}
	}
}

// Wait waits for the probes in flight.
func (c *Cache) Wait() { c.wg.Wait() }

// evictLocked makes room: expired entries go first, otherwise any one not probing.
func (c *Cache) evictLocked(now time.Time) {
	var victim netip.AddrPort
	found := false
	for k, e := range c.entries {
		if e.inflight {
			continue
		}
		if e.state == Unknown || !now.Before(e.expires) {
			delete(c.entries, k)
			return
		}
		if !found {
			victim, found = k, true
		}
	}
	if found {
		delete(c.entries, victim)
	}
}
