package presence

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The dialer's port choice. A dialing socket must know its port before connect, to
// announce it, so it binds first. bind(0) with SO_REUSEADDR, the obvious way, searches
// only the lower half of the local port range, and only its odd ports (the kernel leaves
// the rest to connect's own choice and to binds without SO_REUSEADDR): about 7,000 ports
// with the default range. Once TIME_WAIT sockets of earlier binds fill them (a client that
// closes first leaves one for a minute, so about 120 such connections a second do it),
// each bind(0) scans all of them and then the other half, about a millisecond of system
// time per dial on this VM. So the dialer picks an odd port of the whole range at random
// and binds it without SO_REUSEADDR: the bind succeeds only on a port no socket holds, in
// any state, so connect cannot find its four-tuple taken, and a few tries find one unless
// the range is nearly full. Only then does it fall back to bind(0).

// portTries is how many random ports a dial tries before it falls back to bind(0). A try
// that finds the port held costs one failed bind (well under a microsecond), the fallback's
// scan about a millisecond once TIME_WAIT sockets crowd the range. With 9,000 of them on
// odd ports (about two thirds of those), 2 binds in 400 fell back after 16 tries; 64 tries
// make that about one in a billion, and one in a thousand with nine tenths of them taken.
const portTries = 64

// portRange is the local port range and its reserved ports, read once per process.
type portRange struct {
	low, high int          // inclusive, as in ip_local_port_range
	reserved  map[int]bool // ip_local_reserved_ports
}

var (
	rangeOnce sync.Once
	ports     portRange
)

// localPorts returns the host's local port range (the kernel default if it cannot be
// read).
func localPorts() *portRange {
	rangeOnce.Do(func() {
		ports = readPortRange(readSysctl("/proc/sys/net/ipv4/ip_local_port_range"),
			readSysctl("/proc/sys/net/ipv4/ip_local_reserved_ports"))
	})
	return &ports
}

func readSysctl(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// readPortRange parses ip_local_port_range ("32768\t60999") and ip_local_reserved_ports
// ("8080,9000-9100"); what does not parse is the kernel's default range and no reserved
// ports.
func readPortRange(rangeText, reservedText string) portRange {
	r := portRange{low: 32768, high: 60999}
	if f := strings.Fields(rangeText); len(f) == 2 {
		lo, err1 := strconv.Atoi(f[0])
		hi, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil && 1 <= lo && lo < hi && hi <= 65535 {
			r.low, r.high = lo, hi
		}
	}
	for _, part := range strings.Split(strings.TrimSpace(reservedText), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
				continue
			}
		}
		for p := max(a, r.low); p <= min(b, r.high); p++ {
			if r.reserved == nil {
				r.reserved = make(map[int]bool)
			}
			r.reserved[p] = true
		}
	}
	return r
}

// pick returns a random odd port of the range that is not reserved, or 0 if none was
// found in a few draws.
func (r *portRange) pick() int {
	lo := r.low | 1
	if lo > r.high {
		return 0
	}
	n := (r.high-lo)/2 + 1
	for range 4 {
		if p := lo + 2*rand.IntN(n); !r.reserved[p] {
			return p
		}
	}
	return 0
}
