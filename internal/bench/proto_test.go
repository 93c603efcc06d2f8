package bench

import (
	"errors"
	"testing"
	"time"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []header{
		{modePingPong, 1, 0},
		{modeStream, MaxSize, 200 * time.Millisecond},
	} {
		b := h.append(nil)
		if len(b) != headerLen {
			t.Fatalf("header is %d bytes, want %d", len(b), headerLen)
		}
		got, err := parseHeader(b)
		if err != nil || got != h {
			t.Fatalf("parseHeader(%x) = %+v, %v; want %+v", b, got, err, h)
		}
	}
}

func TestHeaderRejects(t *testing.T) {
	good := header{modeStream, 64, time.Second}.append(nil)
	for name, mutate := range map[string]func(b []byte) []byte{
		"short":     func(b []byte) []byte { return b[:headerLen-1] },
		"magic":     func(b []byte) []byte { b[0] ^= 1; return b },
		"version":   func(b []byte) []byte { b[4] = 1; return b },
		"mode 0":    func(b []byte) []byte { b[5] = 0; return b },
		"mode 3":    func(b []byte) []byte { b[5] = 3; return b },
		"size 0":    func(b []byte) []byte { copy(b[8:], []byte{0, 0, 0, 0}); return b },
		"size big":  func(b []byte) []byte { copy(b[8:], []byte{0x04, 0, 0, 1}); return b },
		"warmup<0":  func(b []byte) []byte { b[16] = 0x80; return b },
		"long":      func(b []byte) []byte { return append(b, 0) },
		"all zeros": func(b []byte) []byte { return make([]byte, headerLen) },
	} {
		b := mutate(append([]byte(nil), good...))
		if _, err := parseHeader(b); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
}

func TestReportRoundTrip(t *testing.T) {
	r := report{messages: 3, bytes: 192, windowBytes: 128, window: 5 * time.Millisecond,
		cpu: cpuSpan{user: 7 * time.Millisecond, sys: 2 * time.Millisecond, wall: 6 * time.Millisecond, ops: 2}}
	b := r.append(nil)
	if len(b) != reportLen {
		t.Fatalf("report is %d bytes, want %d", len(b), reportLen)
	}
	got, err := parseReport(b)
	if err != nil || got != r {
		t.Fatalf("parseReport = %+v, %v; want %+v", got, err, r)
	}
	bad := report{bytes: 10, windowBytes: 11}.append(nil)
	if _, err := parseReport(bad); !errors.Is(err, ErrProtocol) {
		t.Fatalf("window larger than total: got %v, want ErrProtocol", err)
	}
	tooMany := report{messages: 3, bytes: 192, cpu: cpuSpan{ops: 4}}.append(nil)
	if _, err := parseReport(tooMany); !errors.Is(err, ErrProtocol) {
		t.Fatalf("CPU interval with more messages than received: got %v, want ErrProtocol", err)
	}
	b[0] ^= 1
	if _, err := parseReport(b); !errors.Is(err, ErrProtocol) {
		t.Fatalf("bad magic: got %v, want ErrProtocol", err)
	}
}
