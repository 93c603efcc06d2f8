package smcloop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		require.Error(t, err, "%+v: Dial", tc.cfg)
		lc := ListenConfig{Config: tc.cfg}
		_, lerr := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.Error(t, lerr, "%+v: Listen", tc.cfg)
		for _, w := range tc.want {
			assert.ErrorContains(t, err, w, "%+v: Dial", tc.cfg)
			assert.ErrorContains(t, lerr, w, "%+v: Listen", tc.cfg)
		}
	}
	_, err := Dial("udp", "127.0.0.1:1")
	assert.ErrorContains(t, err, "tcp, tcp4, tcp6 or unix stream sockets")
	_, err = (&ListenConfig{Backlog: -1}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	assert.Error(t, err, "negative backlog")
}

func TestConfigRoundsUpToDMBSizes(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{1, 16 << 10}, {16 << 10, 16 << 10}, {16<<10 + 1, 32 << 10}, {100000, 128 << 10}, {1 << 20, 1 << 20}} {
		s, err := (&Config{RMem: tc.in}).resolve()
		require.NoError(t, err)
		assert.Equal(t, tc.want, s.rmem, "RMem %d", tc.in)
	}
}

func TestEnvironment(t *testing.T) {
	d, err := readEnv([]string{"SMCLOOP_RMEM=1M", "SMCLOOP_SEND_MODE=copy", "SMCLOOP_BUSY_POLL=200us", "SMCLOOP_SMCD=off", "SMCLOOP_UEID=TEST-1", "PATH=/bin"})
	require.NoError(t, err)
	assert.Equal(t, 1<<20, d.rmem)
	assert.Equal(t, SendCopy, d.sendMode)
	assert.Equal(t, 200*time.Microsecond, d.busyPoll)
	assert.False(t, d.smcd)
	assert.Equal(t, "TEST-1", d.ueid)
	for _, bad := range []struct{ kv, want string }{
		{"SMCLOOP_RMEM=lots", "SMCLOOP_RMEM"},
		{"SMCLOOP_SEND_MODE=zero", "nocopy or copy"},
		{"SMCLOOP_BUSY_POLL=-1s", "SMCLOOP_BUSY_POLL"},
		{"SMCLOOP_SMCD=maybe", "on or off"},
		{"SMCLOOP_RMME=64K", "unknown environment variable SMCLOOP_RMME"},
		{"SMCLOOP_MAX_DMBS=0", "positive"},
	} {
		_, err := readEnv([]string{bad.kv})
		assert.ErrorContains(t, err, bad.want, bad.kv)
	}
}

// TestZeroConfigResolvesOnce: dials with the defaults share one resolution, equal to
// what resolving it anew gives; any other Config is resolved on its own.
func TestZeroConfigResolvesOnce(t *testing.T) {
	var a, b Config
	sa, err := a.resolve()
	require.NoError(t, err)
	sb, err := b.resolve()
	require.NoError(t, err)
	assert.Same(t, sa, sb, "two resolutions of the zero Config")
	fresh, err := a.resolveNew()
	require.NoError(t, err)
	assert.Equal(t, *fresh, *sa, "the shared resolution against a new one")
	assert.Zero(t, testing.AllocsPerRun(100, func() { a.resolve() }), "allocations of a resolution of the zero Config")

	c := Config{BusyPoll: -1}
	sc, err := c.resolve()
	require.NoError(t, err)
	assert.NotSame(t, sa, sc)
	assert.True(t, sc.noSpin)
	assert.False(t, sa.noSpin)
}
