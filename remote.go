package smcloop

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/smcloop/smcloop/internal/presence"
	"github.com/smcloop/smcloop/internal/verbs"
)

// The gate of the cross-host capability signal (docs/CAPABILITY.md "Across hosts"):
// only a process that can offer SMC-R (an RDMA device is present) probes, announces or
// answers, and only for destinations on other hosts; the host-local signal (SMC-D) stays
// first for a peer on this host.

// rdma is what the process knows of its RDMA devices, asked once: none without the rdma
// build tag, which has no verbs binding.
var rdma struct {
	once    sync.Once
	started atomic.Bool
	done    atomic.Bool
	yes     bool // set in once, read after done
}

// localRDMA reports whether this process has an RDMA device, asking if no one has yet
// (ibv_get_device_list: milliseconds on a slow host). Listen asks: its UDP responder is
// bound then or never.
func localRDMA() bool {
	rdma.once.Do(func() {
		names, err := verbs.System().Devices()
		rdma.yes = err == nil && len(names) > 0
		rdma.done.Store(true)
	})
	return rdma.yes
}

// localRDMAKnown is localRDMA for Dial, which never waits for the answer: until it is
// known (asked in the background by the first dial) the process offers no cross-host
// SMC, which costs those first dials nothing they would not have had (a destination not
// yet probed is dialed plain anyway).
func localRDMAKnown() bool {
	if rdma.done.Load() {
		return rdma.yes
	}
	if rdma.started.CompareAndSwap(false, true) {
		go localRDMA()
	}
	return false
}

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
