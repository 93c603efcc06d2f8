package presence

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

func uniqueName(t *testing.T) string {
	return fmt.Sprintf("smcloop-test/%s/%d", t.Name(), time.Now().UnixNano())
}

func TestRegisterProbe(t *testing.T) {
	name := uniqueName(t)
	if ok, err := Probe(name); ok || err != nil {
		t.Fatalf("absent name probed %v, %v", ok, err)
	}
	e, err := Register(name, true)
	if err != nil {
		t.Fatal(err)
	}
	// Present however often it is probed, though its owner never reads.
	for i := 0; i < 100; i++ {
		if ok, err := Probe(name); !ok || err != nil {
			t.Fatalf("probe %d: %v, %v", i, ok, err)
		}
	}
	if _, err := Register(name, false); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second holder: %v, want EADDRINUSE", err)
	}
	e.Close()
	e.Close() // idempotent
	if ok, _ := Probe(name); ok {
		t.Fatal("name still present after Close")
	}
}

func TestNames(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.1:8080")
	if got := ListenerName(netip.MustParseAddrPort("[::ffff:127.0.0.1]:8080")); got != "smcloop-l/127.0.0.1/8080" {
		t.Fatalf("v4-mapped listener name %q", got)
	}
	if got := DialerName(40000, dst); got != "smcloop-d/40000/127.0.0.1/8080" {
		t.Fatalf("dialer name %q", got)
	}
	want := []string{"smcloop-l/127.0.0.1/8080", "smcloop-l/0.0.0.0/8080", "smcloop-l/::/8080"}
	for i, n := range ListenerNames(dst) {
		if n != want[i] {
			t.Fatalf("ListenerNames[%d] = %q, want %q", i, n, want[i])
		}
	}
}

func TestListenerPresentWildcardAndAbsentCache(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.1:1") // a port no test listens on
	if ListenerPresent(dst) {
		t.Fatal("present without a listener")
	}
	e, err := Register(ListenerName(netip.AddrPortFrom(netip.IPv6Unspecified(), 1)), true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// The absent answer is trusted for absentTTL, then the wildcard listener is found.
	if ListenerPresent(dst) {
		t.Fatal("absent answer not cached")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ListenerPresent(dst) {
		if time.Now().After(deadline) {
			t.Fatal("wildcard listener never found")
		}
		time.Sleep(absentTTL / 5)
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
