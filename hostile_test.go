package smcloop

import (
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/smcd"
)

// localArea is the CDC area of c's own DMB, which only c's peer may write: writing it
// from a test plays a hostile peer.
func localArea(c *Conn) cdc.Area { return c.link.(*smcd.Link).LocalArea() }

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
			if !errors.As(err, &pe) || !errors.Is(err, ErrProtocol) || !errors.Is(err, syscall.ECONNABORTED) {
				t.Fatalf("Read after hostile cursor %v: err = %v, want a ProtocolError", tc.prod, err)
			}
			var ce *cdc.CursorError
			if !errors.As(err, &ce) || ce.Got != tc.prod {
				t.Fatalf("error does not carry the cursor: %v", err)
			}
			// The connection stays aborted; the peer learns of the abort.
			if _, err := a.Read(buf); !errors.Is(err, syscall.ECONNABORTED) {
				t.Fatalf("second Read: %v, want ECONNABORTED", err)
			}
			if _, err := a.Write(buf); !errors.Is(err, syscall.ECONNABORTED) {
				t.Fatalf("Write after abort: %v, want ECONNABORTED", err)
			}
			b.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := b.Read(buf); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("peer Read: %v, want ECONNRESET", err)
			}
		})
	}

	// Other connections of the process carry on.
	msg := []byte("still here")
	if _, err := other.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(other, got); err != nil || string(got) != string(msg) {
		t.Fatalf("other connection: %q, %v", got, err)
	}
}

func TestHostileConsumerCursorAbortsWriter(t *testing.T) {
	a, b := pipe(t, Config{}, Config{})
	defer a.Close()
	defer b.Close()
	// Nothing was sent, so the consumer cursor may not move at all.
	localArea(a).StoreCons(cdc.PackWord(cdc.Cursor{Count: 100}, 0, 0))
	_, err := a.Write([]byte("x"))
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("Write after consumer cursor ran ahead: %v", err)
	}
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
