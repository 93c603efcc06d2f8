package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []header{
		{modePingPong, 1, 0},
		{modeStream, MaxSize, 200 * time.Millisecond},
	} {
		b := h.append(nil)
		require.Len(t, b, headerLen)
		got, err := parseHeader(b)
		require.NoError(t, err, "parseHeader(%x)", b)
		assert.Equal(t, h, got, "parseHeader(%x)", b)
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
		_, err := parseHeader(b)
		assert.ErrorIs(t, err, ErrProtocol, name)
	}
}

func TestReportRoundTrip(t *testing.T) {
	r := report{messages: 3, bytes: 192, windowBytes: 128, window: 5 * time.Millisecond,
		cpu: cpuSpan{user: 7 * time.Millisecond, sys: 2 * time.Millisecond, wall: 6 * time.Millisecond, ops: 2}}
	b := r.append(nil)
	require.Len(t, b, reportLen)
	got, err := parseReport(b)
	require.NoError(t, err)
	assert.Equal(t, r, got)
	_, err = parseReport(report{bytes: 10, windowBytes: 11}.append(nil))
	assert.ErrorIs(t, err, ErrProtocol, "window larger than total")
	_, err = parseReport(report{messages: 3, bytes: 192, cpu: cpuSpan{ops: 4}}.append(nil))
	assert.ErrorIs(t, err, ErrProtocol, "CPU interval with more messages than received")
	b[0] ^= 1
	_, err = parseReport(b)
	assert.ErrorIs(t, err, ErrProtocol, "bad magic")
}
