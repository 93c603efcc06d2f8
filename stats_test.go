package smcloop

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/datapath"
)

// TestProcessStatisticsHandshakes: every handshake outcome is counted once, per side,
// with the fallback reason, as the kernel's smcd stats do. No test of this package runs
// in parallel with another, so the deltas are exact.
func TestProcessStatisticsHandshakes(t *testing.T) {
	before := ProcessStatistics()
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, s := dialAccept(t, ln, Config{}) // SMC on both sides
	require.True(t, c.UsingSMC(), c.Mode())
	require.True(t, s.UsingSMC(), s.Mode())
	pc, err := net.Dial("tcp", ln.Addr().String()) // plain client: server fallback
	require.NoError(t, err)
	defer pc.Close()
	acceptOne(t, ln)
	plain, err := net.Listen("tcp", "127.0.0.1:0") // plain server: client fallback
	require.NoError(t, err)
	defer plain.Close()
	fc, err := Dial("tcp", plain.Addr().String())
	require.NoError(t, err)
	defer fc.Close()

	after := ProcessStatistics()
	assert.Equal(t, uint64(1), after.ClientSMC-before.ClientSMC, "ClientSMC")
	assert.Equal(t, uint64(1), after.ServerSMC-before.ServerSMC, "ServerSMC")
	assert.Equal(t, uint64(1), after.ClientFallback-before.ClientFallback, "ClientFallback")
	assert.Equal(t, uint64(1), after.ServerFallback-before.ServerFallback, "ServerFallback")
	assert.Equal(t, uint64(1), after.ClientReasons[clc.DeclPeerNoSMC]-before.ClientReasons[clc.DeclPeerNoSMC], "ClientReasons[PEERNOSMC]")
	assert.Equal(t, uint64(1), after.ServerReasons[clc.DeclPeerNoSMC]-before.ServerReasons[clc.DeclPeerNoSMC], "ServerReasons[PEERNOSMC]")
	assert.Zero(t, after.ClientHandshakeErr-before.ClientHandshakeErr, "ClientHandshakeErr")
	assert.Zero(t, after.ServerHandshakeErr-before.ServerHandshakeErr, "ServerHandshakeErr")
}

// TestStatsBufferSizes: an SMC connection reports the receive buffers its backend
// allocated on each side (for SMC-D the whole DMB, CDC area included), the two sides'
// figures mirror each other, and a fallback reports none.
func TestStatsBufferSizes(t *testing.T) {
	ln, err := (&ListenConfig{Config: Config{RMem: 32 << 10}}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, s := dialAccept(t, ln, Config{RMem: 128 << 10})
	require.True(t, c.UsingSMC(), c.Mode())
	cs, ss := c.Stats(), s.Stats()
	assert.Equal(t, 128<<10, cs.RMBSize, "client RMBSize")
	assert.Equal(t, 32<<10, cs.PeerRMBSize, "client PeerRMBSize")
	assert.Equal(t, cs.RMBSize, ss.PeerRMBSize, "server PeerRMBSize")
	assert.Equal(t, cs.PeerRMBSize, ss.RMBSize, "server RMBSize")

	f, _ := dialAccept(t, ln, Config{DisableSMC: true})
	require.False(t, f.UsingSMC(), f.Mode())
	fs := f.Stats()
	assert.Zero(t, fs.RMBSize)
	assert.Zero(t, fs.PeerRMBSize)
}

// TestProcessStatisticsBuffers: the backend's buffer counters reach ProcessStatistics:
// a connection between two sides of this process gets a receive buffer and a peer
// mapping on each side, allocated or reused.
func TestProcessStatisticsBuffers(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	before := ProcessStatistics().Buffers
	c, _ := dialAccept(t, ln, Config{})
	require.True(t, c.UsingSMC(), c.Mode())
	after := ProcessStatistics().Buffers
	assert.Equal(t, uint64(2), (after.RMBAlloc+after.RMBReuse)-(before.RMBAlloc+before.RMBReuse), "receive buffers")
	assert.Equal(t, uint64(2), (after.PeerAttach+after.PeerReuse)-(before.PeerAttach+before.PeerReuse), "peer mappings")
}

// TestReasonCounterCap: at most maxFallbackReasons distinct codes are kept, however many
// goroutines add codes at once, and every add to a kept code counts.
func TestReasonCounterCap(t *testing.T) {
	var r reasonCounts
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for code := range uint32(100) {
				if n := r.counter(code); n != nil {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	got := r.snapshot()
	require.Len(t, got, maxFallbackReasons)
	assert.Equal(t, maxFallbackReasons, r.n)
	for code, n := range got {
		assert.Equal(t, uint64(8), n, "code %d", code)
	}
}

// TestProcessStatisticsWakeCost: the process's measured wake-up cost and its sample count
// are the ones the backends feed (datapath.NoteWake).
func TestProcessStatisticsWakeCost(t *testing.T) {
	before := ProcessStatistics()
	datapath.NoteWake(30 * time.Microsecond)
	after := ProcessStatistics()
	require.Greater(t, after.WakeSamples, before.WakeSamples)
	if after.WakeSamples != before.WakeSamples+1 {
		t.Skip("another wake-up of the process was measured meanwhile")
	}
	if before.WakeSamples == 0 {
		assert.Equal(t, 30*time.Microsecond, after.WakeCost, "the first sample")
	} else {
		assert.Equal(t, before.WakeCost+(30*time.Microsecond-before.WakeCost)/8, after.WakeCost, "an eighth of the way")
	}
}
