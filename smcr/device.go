package smcr

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/smcloop/smcloop/internal/verbs"
)

// maxPorts bounds the ports OpenDevice looks at: verbs numbers them from 1, and RoCE
// adapters have one or two.
const maxPorts = 2

// Device is an open RDMA device with the port and GID SMC-R uses on it (the kernel's
// smc_ib_device with smc_ib_determine_gid's choice): what the CLC announces as the
// sender's GID, MAC and MTU, and what every link group of the device builds on.
type Device struct {
	dev    verbs.Device
	port   uint8
	gid    verbs.GIDEntry
	mtu    verbs.MTU
	mu     sync.Mutex
	groups map[GroupKey]*LinkGroup // guarded by mu
	closed bool                    // guarded by mu
	// released counts the groups registered and not yet wholly released (their
	// protection domain closed): a group that went down leaves groups at once, but its
	// goroutine may still be tearing it down, and Close waits for that.
	released sync.WaitGroup
}

// OpenDevice opens the device called name of p (the first device p lists if name is
// empty) and picks the first active port with a RoCE v2 GID that is an IPv4-mapped
// address, as smc_ib_determine_gid does for SMC-Rv2. A device without such a port fails
// with an error matching verbs.ErrNoDevice.
func OpenDevice(p verbs.Provider, name string) (*Device, error) {
	if name == "" {
		names, err := p.Devices()
		if err != nil {
			return nil, fmt.Errorf("smcr: list devices: %w", err)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("smcr: %w", verbs.ErrNoDevice)
		}
		name = names[0]
	}
	dev, err := p.Open(name)
	if err != nil {
		return nil, fmt.Errorf("smcr: open %q: %w", name, err)
	}
	for port := uint8(1); port <= maxPorts; port++ {
		attr, err := dev.QueryPort(port)
		if err != nil {
			break // no such port
		}
		if attr.State != verbs.PortActive {
			continue
		}
		if e, ok := pickGID(attr); ok {
			return &Device{dev: dev, port: port, gid: e, mtu: attr.ActiveMTU, groups: make(map[GroupKey]*LinkGroup)}, nil
		}
	}
	dev.Close()
	return nil, fmt.Errorf("smcr: %s: no active port with an IPv4-mapped RoCE v2 GID: %w", name, verbs.ErrNoDevice)
}

// pickGID returns the first RoCE v2 GID of the port that is an IPv4-mapped address (what
// a RoCE v2 peer routes to; smc_ib_determine_gid_rcu's smc_ib_gid_to_ipv4 test).
func pickGID(attr verbs.PortAttr) (verbs.GIDEntry, bool) {
	for _, e := range attr.GIDs {
		if e.Type == verbs.GIDTypeRoCEv2 && !e.GID.IsZero() && e.GID.IP().To4() != nil {
			return e, true
		}
	}
	return verbs.GIDEntry{}, false
}

// Name is the device's name.
func (d *Device) Name() string { return d.dev.Name() }

// Port is the port number links use.
func (d *Device) Port() uint8 { return d.port }

// GID is the chosen GID: the CLC's sender GID and every link's source GID.
func (d *Device) GID() verbs.GID { return d.gid.GID }

// GIDIndex is the chosen GID's index in the port's table.
func (d *Device) GIDIndex() uint32 { return d.gid.Index }

// MAC is the hardware address of the GID's netdev (the CLC's sender MAC), nil if the
// device does not say.
func (d *Device) MAC() net.HardwareAddr { return d.gid.MAC }

// MTU is the port's active MTU (the CLC's qp_mtu offer).
func (d *Device) MTU() verbs.MTU { return d.mtu }

// Live counts the verbs objects made from the device and not yet closed.
func (d *Device) Live() verbs.Counts { return d.dev.Live() }

// LinkGroup returns the device's link group with peer key, nil if there is none (or it
// ended).
func (d *Device) LinkGroup(key GroupKey) *LinkGroup {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.groups[key]
}

func (d *Device) addGroup(g *LinkGroup) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("smcr: device %s: %w", d.Name(), verbs.ErrClosed)
	}
	if _, dup := d.groups[g.key]; dup {
		return fmt.Errorf("smcr: a link group with peer %v exists already", g.key)
	}
	d.groups[g.key] = g
	g.registered = true
	d.released.Add(1)
	return nil
}

func (d *Device) removeGroup(g *LinkGroup) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.groups[g.key] == g {
		delete(d.groups, g.key)
	}
}

// Close closes every link group of the device (orderly, DELETE_LINK to each peer), waits
// at most twice the LLC timeout for every group that went down, its own or the peer's
// doing, to finish releasing its verbs objects, then closes the device. Connections still
// open on them abort with ErrLinkDown; the device closes once they are closed too, so
// Close fails (EBUSY) while any is.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	groups := make([]*LinkGroup, 0, len(d.groups))
	for _, g := range d.groups {
		groups = append(groups, g)
	}
	d.mu.Unlock()
	for _, g := range groups {
		g.Close()
	}
	done := make(chan struct{})
	go func() {
		d.released.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * DefaultLLCTimeout): // a connection still holds its buffers
	}
	return d.dev.Close()
}
