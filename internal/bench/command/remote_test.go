package command

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseHostAddr(t *testing.T) {
	ap, err := parseHostAddr("--server-host", "10.0.0.1:7700")
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddrPort("10.0.0.1:7700"), ap)
	for _, s := range []string{"", "10.0.0.1", "host.example:7700", "0.0.0.0:7700", "[::]:7700", "10.0.0.1:0", "10.0.0.1:99999"} {
		_, err := parseHostAddr("--server-host", s)
		assert.ErrorIs(t, err, ErrHostAddr, "%q", s)
		assert.ErrorContains(t, err, "bench-host --listen", "the message says what to run")
	}
}

// TestCheckHostArgs: what a bench host accepts from a control connection.
func TestCheckHostArgs(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.1")
	require.NoError(t, checkHostArgs(ip, []string{"--transport", "tcp", "--lifeline", "--listen-ip", "10.0.0.1"}))
	for _, args := range [][]string{
		{"--transport", "tcp", "--listen-ip", "10.0.0.1"},               // no lifeline
		{"--transport", "tcp", "--lifeline"},                            // loopback
		{"--transport", "tcp", "--lifeline", "--listen-ip", "10.0.0.2"}, // not this host's
		{"--transport", "nope", "--lifeline", "--listen-ip", "10.0.0.1"},
		{"--transport", "tcp", "--lifeline", "--listen-ip", "10.0.0.1", "--exec", "/bin/sh"},
		{"--busy", "--lifeline"}, // no CPU burners for others
	} {
		assert.Error(t, checkHostArgs(ip, args), "%q", args)
	}
}
