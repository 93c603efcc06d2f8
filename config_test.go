package smcloop

import (
	"strings"
	"testing"
	"time"
)

func TestConfigErrorsSayWhatToChange(t *testing.T) {
	cases := []struct {
		cfg  Config
		want []string
	}{
		{Config{RMem: 2 << 20}, []string{"RMem", "16 KiB to 1 MiB", "SMCLOOP_RMEM"}},
		{Config{RMem: -5}, []string{"RMem", "out of range"}},
		{Config{WMem: 4 << 20}, []string{"WMem", "SMCLOOP_WMEM"}},
		{Config{SendMode: 7}, []string{"SendMode"}},
		{Config{UEID: "lower case"}, []string{"UEID"}},
		{Config{HandshakeTimeout: -time.Second}, []string{"HandshakeTimeout"}},
	}
	for _, tc := range cases {
		d := Dialer{Config: tc.cfg}
		_, err := d.Dial("tcp", "127.0.0.1:1")
		if err == nil {
			t.Fatalf("%+v: Dial succeeded", tc.cfg)
		}
		lc := ListenConfig{Config: tc.cfg}
		_, lerr := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
		if lerr == nil {
			t.Fatalf("%+v: Listen succeeded", tc.cfg)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) || !strings.Contains(lerr.Error(), w) {
				t.Errorf("%+v: errors %q / %q do not mention %q", tc.cfg, err, lerr, w)
			}
		}
	}
	if _, err := Dial("udp", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "tcp, tcp4, tcp6 or unix stream sockets") {
		t.Errorf("Dial on udp: %v", err)
	}
	if _, err := (&ListenConfig{Backlog: -1}).Listen(t.Context(), "tcp", "127.0.0.1:0"); err == nil {
		t.Error("negative backlog accepted")
	}
}

func TestConfigRoundsUpToDMBSizes(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{1, 16 << 10}, {16 << 10, 16 << 10}, {16<<10 + 1, 32 << 10}, {100000, 128 << 10}, {1 << 20, 1 << 20}} {
		s, err := (&Config{RMem: tc.in}).resolve()
		if err != nil {
			t.Fatal(err)
		}
		if s.rmem != tc.want {
			t.Errorf("RMem %d resolved to %d, want %d", tc.in, s.rmem, tc.want)
		}
	}
}

func TestEnvironment(t *testing.T) {
	d, err := readEnv([]string{"SMCLOOP_RMEM=1M", "SMCLOOP_SEND_MODE=copy", "SMCLOOP_BUSY_POLL=200us", "SMCLOOP_SMCD=off", "SMCLOOP_UEID=TEST-1", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if d.rmem != 1<<20 || d.sendMode != SendCopy || d.busyPoll != 200*time.Microsecond || d.smcd || d.ueid != "TEST-1" {
		t.Fatalf("parsed %+v", d)
	}
	for _, bad := range []struct{ kv, want string }{
		{"SMCLOOP_RMEM=lots", "SMCLOOP_RMEM"},
		{"SMCLOOP_SEND_MODE=zero", "nocopy or copy"},
		{"SMCLOOP_BUSY_POLL=-1s", "SMCLOOP_BUSY_POLL"},
		{"SMCLOOP_SMCD=maybe", "on or off"},
		{"SMCLOOP_RMME=64K", "unknown environment variable SMCLOOP_RMME"},
		{"SMCLOOP_MAX_DMBS=0", "positive"},
	} {
		if _, err := readEnv([]string{bad.kv}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want it to mention %q", bad.kv, err, bad.want)
		}
	}
}
