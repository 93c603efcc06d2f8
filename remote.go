package smcloop

import (
	"net/netip"
	"sync/atomic"

	"github.com/smcloop/smcloop/internal/presence"
)

// The gate of the cross-host capability signal (docs/CAPABILITY.md "Across hosts"):
// only a process that can offer SMC-R (an RDMA device is present) probes, announces or
// answers, and only for destinations on other hosts; the host-local signal (SMC-D) stays
// first for a peer on this host.

// remoteLoopbackForTest is the tests' hook: it turns the gate on and makes loopback a
// remote destination, so the cross-host path runs on one host.
var remoteLoopbackForTest atomic.Bool

// remoteOffered reports whether this process takes part in the cross-host signal (a
// listener's view: it waits for the device list).
func remoteOffered() bool { return remoteLoopbackForTest.Load() || localRDMA() }

// remoteOfferedNow is remoteOffered for a dialer, which does not wait for the device list.
func remoteOfferedNow() bool { return remoteLoopbackForTest.Load() || localRDMAKnown() }

// remoteDestination reports whether a connection to ip leaves this host.
func remoteDestination(ip netip.Addr) bool {
	ip = ip.Unmap()
	if remoteLoopbackForTest.Load() && ip.IsLoopback() {
		return true
	}
	return !presence.IsLocal(ip)
}

// remoteListenAddr reports whether a listener on addr answers the cross-host signal:
// any address but loopback (a wildcard included), since no other host reaches loopback.
func remoteListenAddr(addr netip.Addr) bool {
	return !addr.Unmap().IsLoopback() || remoteLoopbackForTest.Load()
}
