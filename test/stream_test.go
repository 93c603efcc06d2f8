package test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stream sizes: every Write and every Read asks for 1 B .. maxIO bytes.
const (
	maxIO        = 256 << 10
	streamSource = 1 << 20 // the random buffer writes take their windows from
)

// The two sides of a stream draw from different PCG streams of the same seed.
const (
	sideParent = 1
	sideChild  = 2
)

// streamResult is one side's account of a bidirectional stream.
type streamResult struct {
	Sent, Recv       int64
	SentSHA, RecvSHA string
	SendErr, RecvErr string
	Stats            smcloop.ConnStats
}

// runStream sends total bytes on c while it receives until io.EOF, both at once.
// Writes take windows of random size and offset from a random 1 MiB buffer, reads ask
// for random sizes; each direction is hashed as it goes. The writer ends with
// CloseWrite, so the peer's reader sees io.EOF after exactly what was sent.
func runStream(c *smcloop.Conn, total int64, seed uint64, side uint64) streamResult {
	var (
		res streamResult
		wg  sync.WaitGroup
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		src := payload(seed^side, streamSource)
		rng := rand.New(rand.NewPCG(seed, side<<8|1))
		h := sha256.New()
		for res.Sent < total {
			size := 1 + rng.IntN(maxIO)
			if int64(size) > total-res.Sent {
				size = int(total - res.Sent)
			}
			off := rng.IntN(len(src) - size + 1)
			w := src[off : off+size]
			n, err := c.Write(w)
			h.Write(w[:n])
			res.Sent += int64(n)
			if err == nil && n != size {
				err = fmt.Errorf("short write %d of %d with no error", n, size)
			}
			if err != nil {
				res.SendErr = fmt.Sprintf("after %d bytes: %v", res.Sent, err)
				break
			}
		}
		res.SentSHA = hex.EncodeToString(h.Sum(nil))
		if res.SendErr == "" {
			if err := c.CloseWrite(); err != nil {
				res.SendErr = "CloseWrite: " + err.Error()
			}
		}
	}()
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, side<<8|2))
		buf := make([]byte, maxIO)
		h := sha256.New()
		for {
			n, err := c.Read(buf[:1+rng.IntN(maxIO)])
			h.Write(buf[:n])
			res.Recv += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				res.RecvErr = fmt.Sprintf("after %d bytes: %v", res.Recv, err)
				break
			}
			if res.Recv > total {
				res.RecvErr = fmt.Sprintf("received %d bytes, more than the %d sent", res.Recv, total)
				break
			}
		}
		res.RecvSHA = hex.EncodeToString(h.Sum(nil))
	}()
	wg.Wait()
	res.Stats = c.Stats()
	return res
}

// TestCrossProcessStream1GiB streams 1 GiB each way at once between this process and a
// peer process, with random write and read sizes, and checks every byte by SHA-256 on
// both ends. The connection's counters prove the bytes went through shared memory: the
// TCP connection carried the CLC handshake and nothing after it.
func TestCrossProcessStream1GiB(t *testing.T) {
	total := int64(1 << 30)
	if testing.Short() {
		total = 64 << 20
	}
	if v, ok := testEnv[streamBytesEnv]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "%s=%q", streamBytesEnv, v)
		require.Positive(t, n, "%s=%q: want a positive byte count", streamBytesEnv, v)
		total = n
	}
	seed := testSeed(t)
	t.Logf("streaming %d bytes each way", total)

	p := startPeer(t, "stream", strconv.FormatInt(total, 10), strconv.FormatUint(seed, 10))
	c := dial(t, p.addr())
	// Watchdog: a stuck transfer fails with a timeout instead of hanging the suite.
	c.SetDeadline(time.Now().Add(8 * time.Minute))

	start := time.Now()
	mine := runStream(c, total, seed, sideParent)
	elapsed := time.Since(start)
	var theirs streamResult
	p.expectJSON("RESULT", &theirs)
	assert.NoError(t, p.wait(), "peer exit")
	t.Logf("%d bytes each way in %v (%.0f MiB/s per direction)", total, elapsed, float64(total)/elapsed.Seconds()/(1<<20))

	for _, r := range []struct {
		who string
		res streamResult
	}{{"parent", mine}, {"child", theirs}} {
		assert.Empty(t, r.res.SendErr, "%s send", r.who)
		assert.Empty(t, r.res.RecvErr, "%s receive", r.who)
		assert.Equal(t, total, r.res.Sent, "%s: bytes sent", r.who)
		assert.Equal(t, total, r.res.Recv, "%s: bytes received", r.who)
		s := r.res.Stats
		assert.True(t, s.SMC, "%s: connection on SMC", r.who)
		assert.Zero(t, s.TCPBytesSent, "%s: bytes sent on TCP after the handshake", r.who)
		assert.Zero(t, s.TCPBytesRecv, "%s: bytes received on TCP after the handshake", r.who)
		assert.Equal(t, uint64(total), s.SMCBytesSent, "%s: SMCBytesSent", r.who)
		assert.Equal(t, uint64(total), s.SMCBytesRecv, "%s: SMCBytesRecv", r.who)
		assert.Positive(t, s.CLCBytesSent, "%s: CLC bytes sent (the handshake on the TCP connection)", r.who)
		assert.Positive(t, s.CLCBytesRecv, "%s: CLC bytes received (the handshake on the TCP connection)", r.who)
		t.Logf("%s: %+v", r.who, s)
	}
	assert.Equal(t, mine.SentSHA, theirs.RecvSHA, "parent→child: SHA-256 the parent sent, the child received")
	assert.Equal(t, theirs.SentSHA, mine.RecvSHA, "child→parent: SHA-256 the child sent, the parent received")
	assert.NotEqual(t, mine.SentSHA, theirs.SentSHA, "both directions carried the same stream: the test proves nothing")
}
