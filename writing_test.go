package smcloop

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/internal/datapath/pathtest"
)

// ownFake is the in-memory fake backend marked as facing an smcloop peer, as SMC-D is.
type ownFake struct{ *pathtest.End }

func (ownFake) OwnPeer() {}

// ownFakePipe is fakePipe with both ends marked datapath.OwnPeer.
func ownFakePipe(t testing.TB, cfg Config) (client, server *Conn) {
	t.Helper()
	s, err := cfg.resolve()
	require.NoError(t, err)
	ce, se := pathtest.Pair(s.rmem, s.rmem)
	client = newBackendConn(&countingConn{Conn: ce.Liveness()}, s, ownFake{ce}, false)
	server = newBackendConn(&countingConn{Conn: se.Liveness()}, s, ownFake{se}, true)
	return client, server
}

// publishedProdFlags is the producer flags c last published to its peer.
func publishedProdFlags(c *Conn) cdc.ProdFlags {
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	return c.ctl.msg.ProdFlags
}

// A write of several segments, and a sendfile (ReadFrom of a real file), announce
// cdc.Writing from the first segment until just before the last, and only to an smcloop
// peer (SMC-D): SMC-R, which may face a kernel, never sets the reserved bit. The writer is
// caught in the middle by a full ring, and every byte arrives.
func TestWritingFlag(t *testing.T) {
	cfg := Config{RMem: 64 << 10}
	for _, b := range []struct {
		name string
		pipe func(t testing.TB) (client, server *Conn)
		own  bool
	}{
		{"fake", func(t testing.TB) (*Conn, *Conn) { c, s, _, _ := fakePipe(t, cfg, cfg); return c, s }, false},
		{"fake-own-peer", func(t testing.TB) (*Conn, *Conn) { return ownFakePipe(t, cfg) }, true},
		{"smcd", func(t testing.TB) (*Conn, *Conn) { return pipe(t, cfg, cfg) }, true},
		{"smcr-fake", func(t testing.TB) (*Conn, *Conn) { return smcrPipe(t, cfg, cfg) }, false},
	} {
		for _, op := range []string{"write", "sendfile"} {
			t.Run(b.name+"/"+op, func(t *testing.T) {
				client, server := b.pipe(t)
				defer client.Close()
				defer server.Close()
				require.True(t, client.UsingSMC())
				assert.Equal(t, b.own, client.ownPeer)

				msg := pattern(4*client.tx.size+12345, 5)
				var wr <-chan result
				if op == "write" {
					wr = goWrite(client, msg)
				} else {
					path := filepath.Join(t.TempDir(), "body")
					require.NoError(t, os.WriteFile(path, msg, 0o600))
					f, err := os.Open(path)
					require.NoError(t, err)
					defer f.Close()
					ch := make(chan result, 1)
					go func() {
						n, err := client.ReadFrom(f)
						ch <- result{int(n), err}
					}()
					wr = ch
				}
				awaitSleep(t, client, datapath.Writer) // the ring is full, the transfer goes on
				if b.own {
					assert.Equal(t, cdc.Writing, publishedProdFlags(client)&cdc.Writing, "published mid-transfer")
					assert.True(t, server.peerWriting(), "seen by the reader")
				} else {
					assert.Zero(t, publishedProdFlags(client)&cdc.Writing, "published mid-transfer")
					assert.False(t, server.peerWriting())
				}

				got := make([]byte, len(msg))
				_, err := io.ReadFull(server, got)
				require.NoError(t, err)
				r := await(t, wr, op)
				require.NoError(t, r.err)
				assert.Equal(t, len(msg), r.n)
				assert.True(t, bytes.Equal(msg, got), "bytes differ")
				assert.Zero(t, publishedProdFlags(client)&cdc.Writing, "cleared when the transfer ends")
				if b.own {
					assert.False(t, server.peerWriting())
				}
			})
		}
	}
}

// A reader whose spin is backed off spins anyway while its smcloop peer announces that
// it is in the middle of a write, and leaves the back-off as it was; without the
// announcement, or from a peer that is not known to be smcloop, it skips the spin.
func TestWaitSpinsWhilePeerWrites(t *testing.T) {
	resetStarved(t)
	backedOff := spinner{seeded: true, misses: 3, skip: 7}
	for _, tc := range []struct {
		name    string
		own     bool
		writing bool
		spun    bool
	}{
		{"smcloop peer writing", true, true, true},
		{"smcloop peer idle", true, false, false},
		{"other peer with the bit", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var client, server *Conn
			if tc.own {
				client, server = ownFakePipe(t, Config{})
			} else {
				client, server, _, _ = fakePipe(t, Config{}, Config{})
			}
			defer client.Close()
			defer server.Close()
			if tc.writing {
				if tc.own {
					client.tx.mu.Lock()
					client.setProdFlag(cdc.Writing, true)
					client.tx.mu.Unlock()
				} else {
					se := server.backend.(*pathtest.End)
					se.InjectCons(datapath.Cons{Cursor: se.PeerCons().Cursor, ProdFlags: cdc.Writing})
				}
			}
			ready := func() bool { return true } // whichever step looks first ends the wait
			server.rx.mu.Lock()
			server.rx.spin = backedOff
			err := server.waitFor(datapath.Reader, ready, &server.rx.deadline)
			sp := server.rx.spin
			server.rx.mu.Unlock()
			require.NoError(t, err)
			w := server.rx.waits.snapshot()
			assert.Equal(t, uint64(1), w.Waits)
			if tc.spun {
				assert.Equal(t, uint64(1), w.SpinHits, "spun and caught")
				assert.Zero(t, w.SpinSkips)
				assert.Equal(t, backedOff, sp, "the back-off is left as it was")
			} else {
				assert.Zero(t, w.SpinHits)
				assert.Equal(t, uint64(1), w.SpinSkips, "skipped the spin")
				assert.Equal(t, uint32(6), sp.skip)
			}
		})
	}
}
