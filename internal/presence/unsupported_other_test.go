//go:build !linux

package presence

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoSignal: without the signal a listener cannot advertise and a dialer finds no
// listener, so both sides stay plain TCP.
func TestNoSignal(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.1:8080")
	_, err := Advertise(dst)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = AdvertiseUnix(filepath.Join(t.TempDir(), "s"))
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.Nil(t, Lookup(dst))
	assert.Zero(t, LookupUnix(context.Background(), "/nonexistent"))

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var ticket *Ticket
	d := net.Dialer{ControlContext: func(ctx context.Context, network, address string, rc syscall.RawConn) error {
		t, aerr := AnnounceDial(ctx, network, address, rc, DialOptions{})
		ticket = t
		return aerr
	}}
	c, err := d.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	c.Close()
	assert.Nil(t, ticket)
	_, err = AnnounceDial(context.Background(), "tcp4", ln.Addr().String(), nil, DialOptions{Required: true})
	assert.ErrorIs(t, err, ErrNotAnnounced)
}
