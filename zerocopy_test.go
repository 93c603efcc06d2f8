package smcloop

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/datapath/pathtest"
	"github.com/smcloop/smcloop/internal/introspect"
)

// zcStream sends n pattern bytes from w with Reserve/Commit (random sizes) while r
// takes them with Lease/Release (random partial releases), and checks every byte.
func zcStream(t *testing.T, w, r *Conn, n int, seed uint64) {
	t.Helper()
	data := pattern(n, byte(seed))
	got := make(chan [32]byte, 1)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 2))
		h := sha256.New()
		r.SetReadDeadline(time.Now().Add(watchdog))
		for read := 0; read < n; {
			l, err := r.Lease()
			if err != nil {
				t.Errorf("Lease after %d bytes: %v", read, err)
				break
			}
			b := l.Bytes()
			k := len(b)
			if k > 1 && rng.IntN(2) == 0 {
				k = 1 + rng.IntN(k-1) // leave some for the next lease
			}
			h.Write(b[:k])
			read += k
			if err := l.Release(k); err != nil {
				t.Errorf("Release: %v", err)
				break
			}
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		got <- sum
	}()
	rng := rand.New(rand.NewPCG(seed, 1))
	for off := 0; off < n; {
		asked := min(n-off, 1+rng.IntN(300_000))
		res, err := w.Reserve(asked)
		require.NoError(t, err)
		b := res.Bytes()
		require.NotEmpty(t, b)
		require.LessOrEqual(t, len(b), asked)
		k := len(b)
		if k > 1 && rng.IntN(3) == 0 {
			k = 1 + rng.IntN(k-1) // commit part of it
		}
		copy(b, data[off:off+k])
		require.NoError(t, res.Commit(k))
		off += k
	}
	require.Equal(t, sha256.Sum256(data), <-got)
}

func TestZeroCopyStream(t *testing.T) {
	const n = 16 << 20
	fake := backends[0].pipe
	for _, tc := range []struct {
		name string
		cfg  Config
		pipe pairFunc
	}{
		{"fake", Config{RMem: 64 << 10}, fake},
		{"smcd", Config{}, pipe},
		{"smcd-fixed-64k", Config{RMem: 64 << 10}, pipe},
		{"smcd-copy", Config{SendMode: SendCopy}, pipe},
		{"fallback", Config{DisableSMC: true}, pipe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pipe(t, tc.cfg, tc.cfg)
			defer a.Close()
			defer b.Close()
			require.Equal(t, tc.name != "fallback", a.UsingSMC())
			zcStream(t, a, b, n, 7)
			// Mixed with Read and Write afterwards: the byte stream goes on.
			_, err := b.Write([]byte("plain"))
			require.NoError(t, err)
			assert.Equal(t, []byte("plain"), readN(t, a, 5))
		})
	}
}

func TestZeroCopyMisuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{{"smcd", Config{}}, {"fallback", Config{DisableSMC: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pipe(t, tc.cfg, tc.cfg)
			defer a.Close()
			defer b.Close()
			_, err := a.Reserve(0)
			require.ErrorIs(t, err, ErrZeroCopyRange)

			res, err := a.Reserve(10)
			require.NoError(t, err)
			_, err = a.Reserve(10)
			assert.ErrorIs(t, err, ErrZeroCopyBusy, "a second reservation")
			if tc.cfg.DisableSMC {
				// A fallback Write goes straight to TCP: the reservation's bytes follow
				// at Commit.
			} else {
				_, err = a.Write([]byte("x"))
				assert.ErrorIs(t, err, ErrZeroCopyBusy, "Write while reserved")
			}
			copy(res.Bytes(), "0123456789")
			assert.ErrorIs(t, res.Commit(11), ErrZeroCopyRange)
			assert.ErrorIs(t, res.Commit(-1), ErrZeroCopyRange)
			require.NoError(t, res.Commit(10), "the reservation stayed out after a bad Commit")
			assert.Nil(t, res.Bytes(), "Bytes after Commit")
			assert.ErrorIs(t, res.Commit(1), ErrZeroCopyDone, "Commit twice")
			assert.ErrorIs(t, res.Cancel(), ErrZeroCopyDone)

			l, err := b.Lease()
			require.NoError(t, err)
			require.Equal(t, []byte("0123456789"), l.Bytes())
			_, err = b.Lease()
			assert.ErrorIs(t, err, ErrZeroCopyBusy, "a second lease")
			_, err = b.Read(make([]byte, 1))
			assert.ErrorIs(t, err, ErrZeroCopyBusy, "Read while leased")
			assert.ErrorIs(t, l.Release(11), ErrZeroCopyRange)
			require.NoError(t, l.Release(4))
			assert.Nil(t, l.Bytes(), "Bytes after Release")
			assert.ErrorIs(t, l.Release(1), ErrZeroCopyDone, "Release twice")
			assert.Equal(t, []byte("456789"), readN(t, b, 6), "the unreleased rest is read next")
		})
	}
}

// TestZeroCopyAcrossClose: a lease and a reservation held across Close keep their bytes
// mapped and readable; ending them then reports net.ErrClosed and releases the buffers.
func TestZeroCopyAcrossClose(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer b.Close()
	_, err := b.Write([]byte("leased across close"))
	require.NoError(t, err)
	l, err := a.Lease()
	require.NoError(t, err)
	res, err := a.Reserve(1 << 10)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	assert.Equal(t, []byte("leased across close"), l.Bytes(), "the lease's bytes after Close")
	res.Bytes()[0] = 1 // still mapped
	a.zc.mu.Lock()
	owed := a.zc.closeOwed
	a.zc.mu.Unlock()
	assert.True(t, owed, "the buffers wait for the lease and the reservation")
	assert.ErrorIs(t, l.Release(3), net.ErrClosed)
	err = res.Commit(1)
	assert.ErrorIs(t, err, net.ErrClosed)
	a.zc.mu.Lock()
	owed = a.zc.closeOwed
	a.zc.mu.Unlock()
	assert.False(t, owed, "the last end released the buffers")
	assert.ErrorIs(t, l.Release(0), ErrZeroCopyDone)

	// The peer saw an abort (unread data at Close, as the kernel's close) and EOF-like end.
	_, err = io.ReadAll(b)
	assert.True(t, err == nil || errors.Is(err, ErrPeerReset), "%v", err)
	_, err = a.Lease()
	assert.ErrorIs(t, err, net.ErrClosed)
}

// TestZeroCopyEndsRaceClose: a lease and a reservation held across Close end in turn, and
// then at once in two goroutines, many times: the last end closes the link, exactly once,
// and nothing is left out.
func TestZeroCopyEndsRaceClose(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	// heldAcrossClose closes a connection (on the fake backend, whose End counts link
	// closes and panics on a second one) with a lease and a reservation still out.
	heldAcrossClose := func() (a, b *Conn, ae *pathtest.End, l *Lease, res *Reservation) {
		a, b, ae, _ = fakePipe(t, Config{}, Config{})
		_, err := b.Write([]byte("x"))
		require.NoError(t, err)
		l, err = a.Lease()
		require.NoError(t, err)
		res, err = a.Reserve(16)
		require.NoError(t, err)
		require.NoError(t, a.Close())
		require.Zero(t, ae.Events().Closes, "Close left the link's Close to the ends")
		return a, b, ae, l, res
	}

	// In turn: the first end leaves the link to the second.
	_, b, ae, l, res := heldAcrossClose()
	require.ErrorIs(t, l.Release(1), net.ErrClosed)
	require.Zero(t, ae.Events().Closes, "the link closed under a reservation still out")
	require.ErrorIs(t, res.Commit(0), net.ErrClosed)
	require.Equal(t, 1, ae.Events().Closes, "the last end closed the link")
	b.Close()

	// At once, many times.
	for range rounds {
		a, b, ae, l, res := heldAcrossClose()
		errs := make(chan error, 2)
		go func() { errs <- l.Release(1) }()
		go func() { errs <- res.Commit(0) }()
		require.ErrorIs(t, <-errs, net.ErrClosed)
		require.ErrorIs(t, <-errs, net.ErrClosed)
		require.Equal(t, 1, ae.Events().Closes, "exactly one end closed the link")
		a.zc.mu.Lock()
		owed := a.zc.closeOwed
		a.zc.mu.Unlock()
		require.False(t, owed)
		require.False(t, a.zc.leaseOut() || a.zc.resvOut())
		b.Close()
	}
}

// TestZeroCopyLeaseMore: a message larger than one span is leased in pieces with More
// and released at once; over SMC the pieces wrap around the ring.
func TestZeroCopyLeaseMore(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{{"smcd", Config{}}, {"smcd-fixed-64k", Config{RMem: 64 << 10}}, {"fallback", Config{DisableSMC: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pipe(t, tc.cfg, tc.cfg)
			defer a.Close()
			defer b.Close()
			// Move the ring position off zero so that messages wrap.
			_, err := a.Write(make([]byte, 40000))
			require.NoError(t, err)
			readN(t, b, 40000)
			for round := range 20 {
				msg := pattern(50000, byte(round))
				go a.Write(msg)
				l, err := b.Lease()
				require.NoError(t, err)
				var got []byte
				got = append(got, l.Bytes()...)
				for len(got) < len(msg) {
					span, err := l.More()
					require.NoError(t, err)
					require.NotEmpty(t, span)
					got = append(got, span...)
				}
				require.Equal(t, len(got), l.Len())
				require.Equal(t, msg, got[:len(msg)])
				require.NoError(t, l.Release(len(msg)))
				require.Equal(t, 0, l.Len())
				_, err = l.More()
				require.ErrorIs(t, err, ErrZeroCopyDone)
			}
		})
	}
}

// TestZeroCopyReservationSurvivesIdleSweep: a reservation held while the connection
// idles keeps its memory: the sweeper leaves the connection alone until it is committed,
// and the committed bytes arrive exact.
func TestZeroCopyReservationSurvivesIdleSweep(t *testing.T) {
	pauseSweeper(t)
	a, b := pipe(t, Config{AutosplitSize: -1}, Config{}) // reservations as large as the ring allows
	defer a.Close()
	defer b.Close()
	streamExact(t, a, b, 4<<20, 1<<20, 9) // the window is the whole ring
	res, err := a.Reserve(600 << 10)
	require.NoError(t, err)
	buf := res.Bytes()
	require.Greater(t, len(buf), 2*unit, "the reservation spans several units")
	msg := pattern(len(buf), 10)
	copy(buf[:len(buf)/2], msg)
	for range idleTicks + 1 {
		require.False(t, a.sweepIdle(false), "the sweeper shrank a connection with a reservation out")
	}
	copy(buf[len(buf)/2:], msg[len(buf)/2:])
	require.NoError(t, res.Commit(len(buf)))
	require.Equal(t, msg, readN(t, b, len(msg)))
	require.True(t, a.sweepIdle(true), "idle and nothing reserved: it shrinks")
}

// TestZeroCopyReservationSegments: a large reservation is cut to the autosplit size, as
// a large Write is published in segments of it (the reader starts on the first while the
// writer fills the next); one below 4/3 of it, or with autosplit off, is not. A message
// reserved and committed in a loop arrives exact, one publication per segment.
func TestZeroCopyReservationSegments(t *testing.T) {
	for _, tc := range []struct {
		name      string
		autosplit int
		n, want   int
	}{
		{"default, 1 MiB", 0, 1 << 20, 32 << 10},
		{"default, 42 KiB", 0, 42 << 10, 42 << 10}, // below 4/3 of 32 KiB
		{"default, 43 KiB", 0, 43 << 10, 32 << 10}, // at 4/3 of it and beyond
		{"64 KiB, 1 MiB", 64 << 10, 1 << 20, 64 << 10},
		{"off, 600 KiB", -1, 600 << 10, 600 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pipe(t, Config{AutosplitSize: tc.autosplit}, Config{})
			defer a.Close()
			defer b.Close()
			streamExact(t, a, b, 4<<20, 1<<20, 3) // the window is the whole ring
			msg := pattern(tc.n, 7)
			pushes := a.Stats().Pushes
			got := make([]byte, len(msg))
			read := make(chan error, 1)
			go func() { _, err := io.ReadFull(b, got); read <- err }() // a message may exceed the ring
			var sizes []int
			for off := 0; off < len(msg); {
				res, err := a.Reserve(len(msg) - off)
				require.NoError(t, err)
				k := copy(res.Bytes(), msg[off:])
				require.NoError(t, res.Commit(k))
				sizes = append(sizes, k)
				off += k
			}
			require.Equal(t, tc.want, sizes[0], "the first reservation of %d bytes (all: %v)", tc.n, sizes)
			for _, k := range sizes[:len(sizes)-1] {
				require.LessOrEqual(t, k, tc.want, "every reservation: %v", sizes)
			}
			assert.EqualValues(t, len(sizes), a.Stats().Pushes-pushes, "one publication per reservation")
			require.NoError(t, <-read)
			require.Equal(t, msg, got)
		})
	}
}

// TestZeroCopyConcurrentLookups: Bytes and Len may be asked from other goroutines while
// the lease grows and ends, without a data race.
func TestZeroCopyConcurrentLookups(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	for round := range 50 {
		msg := pattern(3000, byte(round))
		_, err := a.Write(msg[:1000])
		require.NoError(t, err)
		l, err := b.Lease()
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 100 {
				_ = l.Bytes()
				_ = l.Len()
			}
		}()
		_, err = a.Write(msg[1000:])
		require.NoError(t, err)
		for l.Len() < len(msg) {
			_, err := l.More()
			require.NoError(t, err)
		}
		require.NoError(t, l.Release(len(msg)))
		<-done
	}
}

// TestZeroCopySizes: a Commit counts in the write-size histogram and a Release in the
// read-size histogram (smcloop stat's tx/rx sizes) as a Write and a Read of their bytes
// would; a Cancel and an empty Release count nothing.
func TestZeroCopySizes(t *testing.T) {
	w, r := pipe(t, Config{}, Config{})
	res, err := w.Reserve(300)
	require.NoError(t, err)
	copy(res.Bytes(), pattern(300, 7))
	require.NoError(t, res.Commit(300))
	res, err = w.Reserve(5000)
	require.NoError(t, err)
	require.NoError(t, res.Cancel())

	require.NoError(t, r.SetReadDeadline(time.Now().Add(watchdog)))
	l, err := r.Lease()
	require.NoError(t, err)
	require.Equal(t, pattern(300, 7), l.Bytes())
	require.NoError(t, l.Release(0))
	l, err = r.Lease()
	require.NoError(t, err)
	require.NoError(t, l.Release(300))

	var tx, rx introspect.Hist
	w.meter.txSizes.addTo(&tx)
	r.meter.rxSizes.addTo(&rx)
	var want introspect.Hist
	want[introspect.Bucket(300)] = 1
	assert.Equal(t, want, tx, "the writer's sizes")
	assert.Equal(t, want, rx, "the reader's sizes")
}

// TestZeroCopyHandles: a message through Reserve, Commit, Lease and Release allocates
// nothing in the steady state (handles come in slabs), and every handle stays its own:
// across several slabs, each one that ended reports ErrZeroCopyDone and no bytes, while
// the current one works.
func TestZeroCopyHandles(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	msg := []byte("fourteen bytes")
	one := func() (*Reservation, *Lease) {
		r, err := a.Reserve(len(msg))
		require.NoError(t, err)
		require.NoError(t, r.Commit(copy(r.Bytes(), msg)))
		l, err := b.Lease()
		require.NoError(t, err)
		if !bytes.Equal(l.Bytes(), msg) { // require.Equal would box the slices: allocations
			t.Fatalf("leased %q, want %q", l.Bytes(), msg)
		}
		require.NoError(t, l.Release(len(msg)))
		return r, l
	}
	one() // the first slabs
	assert.Zero(t, testing.AllocsPerRun(200, func() { one() }), "allocations per message")

	var resvs []*Reservation
	var leases []*Lease
	for range 3*handleSlab + 5 {
		r, l := one()
		resvs, leases = append(resvs, r), append(leases, l)
	}
	cur, err := a.Reserve(len(msg))
	require.NoError(t, err)
	for i, r := range resvs {
		require.NotSame(t, cur, r, "reservation %d", i)
		assert.Nil(t, r.Bytes(), "reservation %d", i)
		assert.ErrorIs(t, r.Commit(1), ErrZeroCopyDone, "reservation %d", i)
	}
	require.NoError(t, cur.Commit(copy(cur.Bytes(), msg)), "the current reservation, after the stale ones' calls")
	curL, err := b.Lease()
	require.NoError(t, err)
	for i, l := range leases {
		require.NotSame(t, curL, l, "lease %d", i)
		assert.Nil(t, l.Bytes(), "lease %d", i)
		assert.Zero(t, l.Len(), "lease %d", i)
		assert.ErrorIs(t, l.Release(1), ErrZeroCopyDone, "lease %d", i)
	}
	assert.Equal(t, msg, curL.Bytes(), "the current lease, after the stale ones' calls")
	require.NoError(t, curL.Release(len(msg)))
}
