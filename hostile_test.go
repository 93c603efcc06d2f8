package smcloop

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/smcd"
)

// localArea is the CDC area of c's own DMB, which only c's peer may write: writing it
// from a test plays a hostile peer.
func localArea(c *Conn) cdc.Area { return c.backend.(*smcd.Link).LocalArea() }

// echo copies everything c reads back to it until EOF or error, then closes it.
func echo(c *Conn) {
	io.Copy(c, c)
	c.Close()
}

func TestHostileProducerCursorAbortsOnlyThatConnection(t *testing.T) {
	victim, victimPeer := pipe(t, Config{}, Config{})
	defer victim.Close()
	defer victimPeer.Close()
	other, otherPeer := pipe(t, Config{}, Config{})
	defer other.Close()
	go echo(otherPeer)

	ringSize := victim.Stats().RMBSize - cdc.AreaSize
	cases := []struct {
		name string
		prod cdc.Cursor
	}{
		{"count beyond ring", cdc.Cursor{Wrap: 0, Count: uint32(ringSize)}},
		{"more than the ring holds", cdc.Cursor{Wrap: 1, Count: 1}},
		{"backwards", cdc.Cursor{Wrap: 0xFFFF, Count: 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pipe(t, Config{}, Config{})
			defer a.Close()
			defer b.Close()
			localArea(a).StoreProd(cdc.PackWord(tc.prod, 0, 0))
			buf := make([]byte, 16)
			_, err := a.Read(buf)
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe, "Read after hostile cursor %v", tc.prod)
			assert.ErrorIs(t, err, ErrProtocol)
			assert.ErrorIs(t, err, syscall.ECONNABORTED)
			var ce *cdc.CursorError
			require.ErrorAs(t, err, &ce, "the error carries the cursor")
			assert.Equal(t, tc.prod, ce.Got)
			// The connection stays aborted; the peer learns of the abort.
			_, err = a.Read(buf)
			assert.ErrorIs(t, err, syscall.ECONNABORTED, "second Read")
			_, err = a.Write(buf)
			assert.ErrorIs(t, err, syscall.ECONNABORTED, "Write after abort")
			b.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = b.Read(buf)
			assert.ErrorIs(t, err, syscall.ECONNRESET, "peer Read")
		})
	}

	// Other connections of the process carry on.
	msg := []byte("still here")
	_, err := other.Write(msg)
	require.NoError(t, err)
	got := make([]byte, len(msg))
	_, err = io.ReadFull(other, got)
	require.NoError(t, err, "other connection")
	assert.Equal(t, msg, got, "other connection")
}

func TestHostileConsumerCursorAbortsWriter(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	// Nothing was sent, so the consumer cursor may not move at all.
	localArea(a).StoreCons(cdc.PackWord(cdc.Cursor{Count: 100}, 0, 0))
	_, err := a.Write([]byte("x"))
	assert.ErrorIs(t, err, ErrProtocol, "Write after the consumer cursor ran ahead")
}

// FuzzPeerCDC writes arbitrary producer and consumer words into a live connection's CDC
// area after real data went through it: the connection either keeps working or aborts
// with a typed error; it never reads outside the ring or panics.
func FuzzPeerCDC(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint16(10))
	f.Add(cdc.PackWord(cdc.Cursor{Count: 20}, 0, 0), cdc.PackWord(cdc.Cursor{}, 0, cdc.PeerConnClosed), uint16(20))
	f.Add(cdc.PackWord(cdc.Cursor{Wrap: 3, Count: 1 << 31}, 0xff, 0xff), ^uint64(0), uint16(1))
	f.Fuzz(func(t *testing.T, prod, cons uint64, n uint16) {
		x, y := pipe(t, Config{RMem: 16 << 10}, Config{RMem: 16 << 10})
		defer x.Close()
		defer y.Close()
		payload := make([]byte, int(n)%2048)
		for i := range payload {
			payload[i] = byte(i)
		}
		if _, err := y.Write(payload); err != nil {
			t.Fatal(err)
		}
		area := localArea(x)
		area.StoreProd(prod)
		area.StoreCons(cons)
		x.SetDeadline(time.Now().Add(20 * time.Millisecond))
		buf := make([]byte, 4096)
		for range 4 {
			_, err := x.Read(buf)
			if err != nil && !errors.Is(err, ErrProtocol) && !errors.Is(err, os.ErrDeadlineExceeded) &&
				!errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.ECONNABORTED) {
				t.Fatalf("Read: untyped error %v", err)
			}
		}
		_, err := x.Write(payload)
		if err != nil && !errors.Is(err, ErrProtocol) && !errors.Is(err, os.ErrDeadlineExceeded) &&
			!errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.ECONNABORTED) {
			t.Fatalf("Write: untyped error %v", err)
		}
	})
}

// FuzzAdversarialPeer plays a peer that, while bytes stream on a live connection, writes
// arbitrary values into every word of the victim's CDC area it can reach: the producer
// cursor and flags (wild, or moved forward by an arbitrary length, so that traffic goes
// on), the consumer cursor and connection flags, and the wake word, at points the script
// chooses between the victim's Reads and Writes. The victim never hangs (each call is
// bounded by a deadline), never panics or touches memory outside its mappings, and
// fails only with typed errors: ErrProtocol for what it could check, EOF or a reset
// for close flags. A bystander connection of the same link group streams a checksummed
// 256 KiB the whole time and gets every byte.
func FuzzAdversarialPeer(f *testing.F) {
	op := func(sel byte, v uint64) []byte {
		b := []byte{sel, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.LittleEndian.PutUint64(b[1:], v)
		return b
	}
	f.Add(op(3, 100))
	f.Add(append(op(3, 5000), op(0, cdc.PackWord(cdc.Cursor{Wrap: 9, Count: 7}, 0, 0))...))
	f.Add(append(op(1, cdc.PackWord(cdc.Cursor{Count: 1 << 20}, 0, 0)), op(4, 0)...))
	f.Add(append(op(2, ^uint64(0)), op(5, cdc.PackWord(cdc.Cursor{}, 0, cdc.PeerConnClosed))...))
	f.Add(op(1, cdc.PackWord(cdc.Cursor{}, cdc.WriteBlocked, cdc.PeerDoneWriting)))
	f.Fuzz(func(t *testing.T, script []byte) {
		const ring = 16 << 10
		victim, peer := pipe(t, Config{RMem: ring}, Config{RMem: ring})
		defer peer.Close()
		by, byPeer := pipe(t, Config{RMem: ring}, Config{RMem: ring})
		defer by.Close()
		defer byPeer.Close()

		// The bystander: 256 KiB one way, checked byte for byte at the end.
		want := make([]byte, 256<<10)
		for i := range want {
			want[i] = byte(i*7 + i>>9)
		}
		byDone := make(chan error, 1)
		go func() {
			byPeer.SetDeadline(time.Now().Add(20 * time.Second))
			_, err := byPeer.Write(want)
			if err == nil {
				err = byPeer.CloseWrite()
			}
			byDone <- err
		}()
		byGot := make(chan []byte, 1)
		go func() {
			by.SetDeadline(time.Now().Add(20 * time.Second))
			b, _ := io.ReadAll(by)
			byGot <- b
		}()

		// The victim's honest peer streams into it until the victim is gone.
		peerDone := make(chan struct{})
		go func() {
			defer close(peerDone)
			chunk := bytes.Repeat([]byte("smcloop!"), 512)
			peer.SetWriteDeadline(time.Now().Add(20 * time.Second))
			for {
				if _, err := peer.Write(chunk); err != nil {
					return
				}
			}
		}()

		typed := func(op string, err error) {
			t.Helper()
			if err == nil || errors.Is(err, ErrProtocol) || errors.Is(err, os.ErrDeadlineExceeded) ||
				errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
				errors.Is(err, syscall.EPIPE) {
				return
			}
			t.Fatalf("%s: untyped error %v", op, err)
		}
		area := localArea(victim)
		buf := make([]byte, 4096)
		for i := 0; i+9 <= len(script) && i < 16*9; i += 9 {
			sel, v := script[i], binary.LittleEndian.Uint64(script[i+1:])
			switch sel % 6 {
			case 0: // a wild producer word
				area.StoreProd(v)
			case 1: // a wild consumer word and flags
				area.StoreCons(v)
			case 2: // a wild wake word
				area.AndWake(0)
				area.OrWake(v)
			case 3: // the producer cursor moved forward by an arbitrary length
				w := area.LoadProd()
				c, pf, cf := cdc.UnpackWord(w)
				area.StoreProd(cdc.PackWord(c.Add(ring-cdc.AreaSize, int(v%(ring-cdc.AreaSize+1))), pf, cf))
			}
			victim.SetDeadline(time.Now().Add(5 * time.Millisecond))
			if sel&0x80 == 0 {
				_, err := victim.Read(buf)
				typed("Read", err)
			} else {
				_, err := victim.Write(buf[:int(v%4096)])
				typed("Write", err)
			}
		}
		victim.Close()
		<-peerDone

		if err := <-byDone; err != nil {
			t.Fatalf("bystander writer: %v", err)
		}
		if got := <-byGot; !bytes.Equal(got, want) {
			t.Fatalf("bystander got %d bytes of %d, first difference at %d", len(got), len(want), firstDifference(got, want))
		}
	})
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
