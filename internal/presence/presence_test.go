package presence

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNames(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.1:8080")
	assert.Equal(t, "smcloop-l/127.0.0.1/8080", ListenerName(netip.MustParseAddrPort("[::ffff:127.0.0.1]:8080")), "v4-mapped listener name")
	assert.Equal(t, []string{"smcloop-l/127.0.0.1/8080", "smcloop-l/0.0.0.0/8080", "smcloop-l/::/8080"}, ListenerNames(dst))
}

func TestIsLocal(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "::1", "0.0.0.0", "::ffff:127.0.0.1"} {
		assert.True(t, IsLocal(netip.MustParseAddr(s)), "%s local", s)
	}
	assert.False(t, IsLocal(netip.MustParseAddr("192.0.2.1")), "192.0.2.1 (TEST-NET-1, never a local address here) local")
}
