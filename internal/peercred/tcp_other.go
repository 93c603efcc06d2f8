//go:build !linux

package peercred

import (
	"errors"
	"net/netip"
)

// ErrNoSocket is returned when no socket of this host has the far end's address.
var ErrNoSocket = errors.New("no local socket at the other end of the connection")

// Socket identifies the far end of a local TCP connection.
type Socket struct {
	UID   uint32
	Inode uint32
}

// TCPPeer needs Linux's socket diagnostics; elsewhere no far end can be identified.
func TCPPeer(local, remote netip.AddrPort) (Socket, error) {
	return Socket{}, errors.New("peercred: identifying a TCP peer needs Linux")
}
