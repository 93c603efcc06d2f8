// Package peercred decides which local users an smcloop process shares memory with, and
// finds the user behind the far end of a local TCP connection.
//
// SMC-D maps a peer's memory into this process and lets the peer write into ours, so a
// peer is a principal we trust with our connection's bytes. smcloop trusts processes of
// its own uid and of root (root can read our memory anyway), plus the uids listed in
// SMCLOOP_PEER_UIDS. Every place where another process can reach us (the ISM device
// socket, the listener's registration table, the CLC handshake itself) applies the same
// rule, so a process of another user gets plain TCP, never shared memory
// (docs/SECURITY.md).
package peercred

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// EnvPeerUIDs names the environment variable with the extra uids to trust: a comma
// separated list of numeric uids, e.g. "1000,1001".
const EnvPeerUIDs = "SMCLOOP_PEER_UIDS"

// ErrUntrusted is returned when the process at the other end belongs to a user this
// process does not share memory with.
var ErrUntrusted = errors.New("peer process belongs to a user this process does not trust")

// ParseUIDs parses an SMCLOOP_PEER_UIDS value.
func ParseUIDs(v string) ([]uint32, error) {
	var uids []uint32
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		u, err := strconv.ParseUint(f, 10, 32)
		if err != nil || u == 1<<32-1 {
			return nil, fmt.Errorf("%q is not a numeric uid; want a comma separated list such as 1000,1001", f)
		}
		uids = append(uids, uint32(u))
	}
	return uids, nil
}

var (
	extraOnce sync.Once
	extra     []uint32
)

// extraUIDs returns the uids of SMCLOOP_PEER_UIDS, read once. An invalid value trusts no
// extra uid here; the smcloop package reports it from every Dial and Listen.
func extraUIDs() []uint32 {
	extraOnce.Do(func() { extra, _ = ParseUIDs(os.Getenv(EnvPeerUIDs)) })
	return extra
}

// Trusted reports whether a process of uid may share memory with this process: the
// same uid, root, or a uid listed in SMCLOOP_PEER_UIDS.
func Trusted(uid uint32) bool {
	if uid == uint32(os.Geteuid()) || uid == uint32(os.Getuid()) || uid == 0 {
		return true
	}
	for _, u := range extraUIDs() {
		if u == uid {
			return true
		}
	}
	return false
}
