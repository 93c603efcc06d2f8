package test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop"
)

// soakEnv turns the soak on and says for how long, e.g. SMCLOOP_TEST_SOAK=10m (make soak).
const soakEnv = "SMCLOOP_TEST_SOAK"

// soakConns is how many connections run at once for the whole soak.
const soakConns = 100

// TestSoak runs soakConns connections at once between this process and an echo server
// process for the duration in SMCLOOP_TEST_SOAK (skipped without it; not part of make test).
// Each connection slot dials again and again, each time with random settings (cork
// around writes, NoDelay, WriteMore, autosplit and autocork sizes, copy or no-copy send
// mode), sends a random number of messages of random sizes (1 B to 1 MiB, log-uniform)
// and checks the echo byte for byte while it writes, and the SHA-256 of what the server
// received against what it sent. RSS of both processes is sampled every 10 s: the test
// fails on any corrupted byte or failed connection, and if the last third of the run
// holds more than the first third's peak plus a quarter and 16 MiB.
func TestSoak(t *testing.T) {
	v := testEnv[soakEnv]
	if v == "" {
		t.Skipf("the soak runs with %s=<duration> (make soak)", soakEnv)
	}
	dur, err := time.ParseDuration(v)
	require.NoError(t, err, "%s=%q", soakEnv, v)
	seed := testSeed(t)
	srv := startPeer(t, "soakserver")
	addr := srv.addr()

	var st soakTotals
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	errs := make(chan error, soakConns)
	for i := range soakConns {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for n := 0; time.Now().Before(end); n++ {
				if err := soakOne(addr, rng, &st); err != nil {
					errs <- fmt.Errorf("slot %d, connection %d: %w", i, n, err)
					return
				}
			}
		})
	}

	type sample struct {
		at       time.Duration
		cli, srv usage
	}
	var samples []sample
	start := time.Now()
	tick := time.NewTicker(10 * time.Second)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
			s := sample{time.Since(start).Round(time.Second), procUsage(t, 0), procUsage(t, srv.pid())}
			samples = append(samples, s)
			t.Logf("%v: %d conns (%d SMC-D), %d msgs, %.2f GB each way; RSS client %d MiB, server %d MiB; fds client %d, server %d",
				s.at, st.conns.Load(), st.smc.Load(), st.msgs.Load(), float64(st.bytes.Load())/1e9,
				s.cli.rssKB>>10, s.srv.rssKB>>10, s.cli.fds, s.srv.fds)
		}
	}
	tick.Stop()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	srv.send("exit")
	srv.expect("BYE")

	t.Logf("soak of %v, seed %d: %d connections (%d SMC-D), %d messages, %.2f GB each way, %d corrupted",
		dur, seed, st.conns.Load(), st.smc.Load(), st.msgs.Load(), float64(st.bytes.Load())/1e9, st.corrupt.Load())
	assert.Zero(t, st.corrupt.Load(), "corrupted streams")
	assert.Equal(t, st.conns.Load(), st.smc.Load(), "connections that fell back to TCP")
	if len(samples) >= 6 {
		third := len(samples) / 3
		for _, who := range []struct {
			name string
			rss  func(sample) int
		}{{"client", func(s sample) int { return s.cli.rssKB }}, {"server", func(s sample) int { return s.srv.rssKB }}} {
			var first, last []int
			for _, s := range samples[:third] {
				first = append(first, who.rss(s))
			}
			for _, s := range samples[len(samples)-third:] {
				last = append(last, who.rss(s))
			}
			bound := slices.Max(first) + slices.Max(first)/4 + 16<<10
			t.Logf("%s RSS: first third %d..%d MiB, last third %d..%d MiB", who.name,
				slices.Min(first)>>10, slices.Max(first)>>10, slices.Min(last)>>10, slices.Max(last)>>10)
			assert.LessOrEqual(t, slices.Max(last), bound, "%s RSS grew over the soak (KiB)", who.name)
		}
	}
}

type soakTotals struct {
	conns, smc, msgs, bytes, corrupt atomic.Int64
}

// soakOne makes one connection with random settings, runs a random exchange over it and
// checks every byte of the echo and the server's checksum of what it received.
func soakOne(addr string, rng *rand.Rand, st *soakTotals) error {
	var d smcloop.Dialer
	d.Config.AutosplitSize = []int{-1, 0, 64 << 10, 256 << 10}[rng.IntN(4)]
	d.Config.AutocorkSize = []int{-1, 0, 16 << 10}[rng.IntN(3)]
	if rng.IntN(4) == 0 {
		d.Config.SendMode = smcloop.SendCopy
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	st.conns.Add(1)
	if c.UsingSMC() {
		st.smc.Add(1)
	}
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	nodelay, cork, more := rng.IntN(2) == 0, rng.IntN(3) == 0, rng.IntN(3) == 0
	if err := c.SetNoDelay(nodelay); err != nil {
		return fmt.Errorf("SetNoDelay: %w", err)
	}
	msgs := 1 + rng.IntN(200)
	sizes := make([]int, msgs)
	total := 0
	for i := range sizes {
		sizes[i] = 1 << rng.IntN(21) // 1 B .. 1 MiB
		sizes[i] += rng.IntN(sizes[i])
		sizes[i] = min(sizes[i], 1<<20)
		total += sizes[i]
	}
	// Both directions are the PCG stream of key, made and checked a message at a time:
	// no connection holds more than its largest message twice.
	key := rng.Uint64()
	sum := make(chan []byte, 1)
	werr := make(chan error, 1)
	go func() {
		werr <- func() error {
			src := newPattern(key)
			h := sha256.New()
			buf := make([]byte, 1<<20)
			for i, n := range sizes {
				msg := buf[:n]
				src.fill(msg)
				h.Write(msg)
				var err error
				switch {
				case cork && i%8 == 0:
					if err = c.SetCork(true); err == nil {
						if _, err = c.Write(msg); err == nil {
							err = c.SetCork(false)
						}
					}
				case more && i+1 < len(sizes):
					_, err = c.WriteMore(msg)
				default:
					_, err = c.Write(msg)
				}
				if err != nil {
					return fmt.Errorf("write of message %d (%d bytes): %w", i, n, err)
				}
			}
			sum <- h.Sum(nil)
			return c.CloseWrite()
		}()
	}()
	want := newPattern(key)
	got, exp := make([]byte, 256<<10), make([]byte, 256<<10)
	for off := 0; off < total; {
		n := min(len(got), total-off)
		if _, err := io.ReadFull(c, got[:n]); err != nil {
			return fmt.Errorf("reading the echo at %d of %d bytes (cork %v, more %v, nodelay %v, %+v): %w", off, total, cork, more, nodelay, d.Config, err)
		}
		want.fill(exp[:n])
		if !bytes.Equal(got[:n], exp[:n]) {
			st.corrupt.Add(1)
			return fmt.Errorf("echo of %d bytes differs at %d (cork %v, more %v, nodelay %v, %+v)", total, off+firstDiff(got[:n], exp[:n]), cork, more, nodelay, d.Config)
		}
		off += n
	}
	if err := <-werr; err != nil {
		return err
	}
	// After the echo the server sends the hex SHA-256 of what it read, then EOF.
	rest, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("reading the server's checksum: %w", err)
	}
	if want := hex.EncodeToString(<-sum); strings.TrimSpace(string(rest)) != want {
		st.corrupt.Add(1)
		return fmt.Errorf("server's SHA-256 of %d bytes %q, want %s", total, rest, want)
	}
	st.msgs.Add(int64(msgs))
	st.bytes.Add(int64(total))
	return nil
}

// pattern is a PCG byte stream: fill continues where the last call stopped.
type pattern struct {
	r    *rand.Rand
	word [8]byte
	left int // bytes of word not handed out yet
}

func newPattern(key uint64) *pattern { return &pattern{r: rand.New(rand.NewPCG(key, 0x736f616b))} }

func (p *pattern) fill(b []byte) {
	for len(b) > 0 {
		if p.left == 0 {
			binary.LittleEndian.PutUint64(p.word[:], p.r.Uint64())
			p.left = 8
		}
		n := copy(b, p.word[8-p.left:])
		p.left -= n
		b = b[n:]
	}
}

// peerSoakServer echoes every connection, then writes the hex SHA-256 of all it read
// and closes. It exits on "exit" (printing "BYE") or when stdin closes.
func peerSoakServer() error {
	ln, err := peerListen()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(peerWatchdog))
				h := sha256.New()
				buf := make([]byte, 256<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						h.Write(buf[:n])
						if _, werr := c.Write(buf[:n]); werr != nil {
							fmt.Fprintf(os.Stderr, "soak server: echo: %v\n", werr)
							return
						}
					}
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						fmt.Fprintf(os.Stderr, "soak server: read: %v\n", err)
						return
					}
				}
				io.WriteString(c, hex.EncodeToString(h.Sum(nil))+"\n")
				c.CloseWrite()
			})
		}
	})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() && sc.Text() != "exit" {
	}
	ln.Close()
	wg.Wait()
	say("BYE")
	return nil
}
