package presence

import (
	"net/netip"
	"testing"
)

func TestNames(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.1:8080")
	if got := ListenerName(netip.MustParseAddrPort("[::ffff:127.0.0.1]:8080")); got != "smcloop-l/127.0.0.1/8080" {
		t.Fatalf("v4-mapped listener name %q", got)
	}
	want := []string{"smcloop-l/127.0.0.1/8080", "smcloop-l/0.0.0.0/8080", "smcloop-l/::/8080"}
	for i, n := range ListenerNames(dst) {
		if n != want[i] {
			t.Fatalf("ListenerNames[%d] = %q, want %q", i, n, want[i])
		}
	}
}

func TestIsLocal(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "::1", "0.0.0.0", "::ffff:127.0.0.1"} {
		if !IsLocal(netip.MustParseAddr(s)) {
			t.Errorf("%s not local", s)
		}
	}
	if IsLocal(netip.MustParseAddr("192.0.2.1")) { // TEST-NET-1, never a local address here
		t.Error("192.0.2.1 counted as local")
	}
}
