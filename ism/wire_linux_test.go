package ism

import (
	"bytes"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/shm"
	"golang.org/x/sys/unix"
)

// Scripted-peer tests: a fake device (or a fake client) speaks the device protocol by
// hand, so each test controls exactly what the real device receives.

func TestWireLayout(t *testing.T) {
	m := wireMsg{op: opAttach, token: 0x0102030405060708, size: 0x11223344, aux: flagNeedSignal, from: GID{0xA1A2A3A4A5A6A7A8, 0xB1B2B3B4B5B6B7B8}}
	b := m.marshal()
	want := []byte{
		0x44, 0x43, 0x4d, 0x53, // magic "SMCD" as a little-endian u32
		0x02, 0x00, // version 2
		0x02, 0x00, // op attach
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // token
		0x44, 0x33, 0x22, 0x11, // size
		0x01, 0, 0, 0, // flags: need the signal channel
		0xA8, 0xA7, 0xA6, 0xA5, 0xA4, 0xA3, 0xA2, 0xA1, // sender GID
		0xB8, 0xB7, 0xB6, 0xB5, 0xB4, 0xB3, 0xB2, 0xB1, // sender GID extension
	}
	require.Equal(t, want, b, "marshal")
	got, err := parseWire(b)
	require.NoError(t, err, "parseWire(marshal(m))")
	require.Equal(t, m, got, "parseWire(marshal(m))")
	for _, bad := range [][]byte{
		nil,
		b[:wireLen-1],
		append(append([]byte{}, b...), 0),
		func() []byte { c := bytes.Clone(b); c[0] ^= 1; return c }(), // magic
		func() []byte { c := bytes.Clone(b); c[4] = 1; return c }(),  // version 1
	} {
		assert.Error(t, errOf(parseWire(bad)), "parseWire(% x)", bad)
	}
}

func FuzzParseWire(f *testing.F) {
	f.Add(wireMsg{op: opQuery}.marshal())
	f.Add(wireMsg{op: opAttach, token: 7, size: MinDMBSize, from: GID{1, 2}}.marshal())
	f.Add([]byte("SMCD"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseWire(b)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to the same bytes: every field is kept.
		require.Equal(t, b, m.marshal(), "parse then marshal")
	})
}

// fakeDevice listens on the socket of a made-up GID and answers each request with
// whatever reply returns: the message bytes and the fds to attach (not closed).
type fakeDevice struct {
	gid     GID
	ln      *net.UnixListener
	wg      sync.WaitGroup // accept loop and connections
	mu      sync.Mutex
	idle    *sync.Cond // signalled (with mu) when a connection ends
	conns   []*net.UnixConn
	accepts int
	active  int // connections being served
}

func newFakeDevice(t *testing.T, reply func(req wireMsg) ([]byte, []int)) *fakeDevice {
	t.Helper()
	f := &fakeDevice{gid: GID{0xFA4E, uint64(time.Now().UnixNano())}}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: f.gid.socketName(), Net: "unixpacket"})
	require.NoError(t, err)
	f.ln = ln
	f.idle = sync.NewCond(&f.mu)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.accepts++
			f.active++
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer func() {
					c.Close()
					f.mu.Lock()
					f.active--
					f.idle.Broadcast()
					f.mu.Unlock()
				}()
				buf := make([]byte, 64)
				for {
					n, err := c.Read(buf)
					if err != nil || n == 0 {
						return
					}
					req, err := parseWire(buf[:n])
					if err != nil {
						return
					}
					msg, fds := reply(req)
					if msg == nil {
						continue // never answer
					}
					if err := shm.SendFds(c, msg, fds...); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

// waitIdle returns once every connection made so far has ended.
func (f *fakeDevice) waitIdle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.active > 0 {
		f.idle.Wait()
	}
}

func (f *fakeDevice) acceptCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepts
}

func openTestDevice(t *testing.T) *Device {
	t.Helper()
	d, err := Open(Config{})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

func countFDs(t *testing.T) int {
	t.Helper()
	n, err := shm.OpenFDs()
	require.NoError(t, err)
	return n
}

func TestQueryRefusesBadReplies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply []byte
		conns int // connections made: one, plus one redial for a broken exchange
	}{
		{"bad magic", func() []byte { b := wireMsg{op: statusOK}.marshal(); b[0] = 'X'; return b }(), 2},
		{"short reply", wireMsg{op: statusOK}.marshal()[:20], 2},
		{"status not OK", wireMsg{op: statusBadOp}.marshal(), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openTestDevice(t)
			f := newFakeDevice(t, func(wireMsg) ([]byte, []int) { return tc.reply, nil })
			require.ErrorIs(t, d.QueryRemoteGID(f.gid), ErrUnreachable, "QueryRemoteGID")
			assert.Equal(t, tc.conns, f.acceptCount(), "connections to the fake device")
		})
	}
}

// TestAttachRefusesHostileReplies: a device that answers an attach with the wrong kind of
// descriptors, an unsealed memfd, a size that lies or a mismatched token is refused, and
// every descriptor it sent is closed.
func TestAttachRefusesHostileReplies(t *testing.T) {
	const size = 32 << 10
	good, err := shm.NewRegion("hostile-good", size)
	require.NoError(t, err)
	defer good.Close()
	small, err := shm.NewRegion("hostile-small", MinDMBSize)
	require.NoError(t, err)
	defer small.Close()
	unsealed, err := unix.MemfdCreate("hostile-unsealed", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(unsealed)
	require.NoError(t, unix.Ftruncate(unsealed, size))
	// A well-formed signal channel: a stream socket end and a sealed bitmap.
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(pair[0])
	defer unix.Close(pair[1])
	seq, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(seq[0])
	defer unix.Close(seq[1])
	bitmap, err := newSealedMemfd("hostile-bitmap", int64(sigBitmapSize(DefaultMaxDMBs)))
	require.NoError(t, err)
	defer unix.Close(bitmap)
	sock := pair[1]
	page, err := newSealedMemfd("hostile-page", int64(os.Getpagesize()))
	require.NoError(t, err)
	defer unix.Close(page)

	ok := func(req wireMsg) []byte { return wireMsg{op: statusOK, token: req.token, size: req.size}.marshal() }
	at := func(index uint32, off uint64) func(req wireMsg) []byte {
		return func(req wireMsg) []byte {
			return wireMsg{op: statusOK, token: req.token, size: req.size, aux: index, from: GID{Hi: off}}.marshal()
		}
	}
	for _, tc := range []struct {
		name   string
		reply  func(req wireMsg) ([]byte, []int)
		reason error // nil: any error
	}{
		{"socket for memory", func(r wireMsg) ([]byte, []int) { return ok(r), []int{sock, sock, bitmap} }, shm.ErrNotMemfd},
		{"unsealed memfd", func(r wireMsg) ([]byte, []int) { return ok(r), []int{unsealed, sock, bitmap} }, shm.ErrNotSealed},
		{"memfd smaller than claimed", func(r wireMsg) ([]byte, []int) { return ok(r), []int{small.Fd(), sock, bitmap} }, shm.ErrSizeMismatch},
		{"offset past the memfd", func(r wireMsg) ([]byte, []int) { return at(0, size)(r), []int{good.Fd(), sock, bitmap} }, shm.ErrSizeMismatch},
		{"unaligned offset", func(r wireMsg) ([]byte, []int) { return at(0, 100)(r), []int{good.Fd(), sock, bitmap} }, shm.ErrSizeMismatch},
		{"negative offset", func(r wireMsg) ([]byte, []int) { return at(0, 1<<63)(r), []int{good.Fd(), sock, bitmap} }, shm.ErrSizeMismatch},
		{"index past the bitmap", func(r wireMsg) ([]byte, []int) { return at(1<<30, 0)(r), []int{good.Fd(), sock, bitmap} }, nil},
		{"memfd for the signal socket", func(r wireMsg) ([]byte, []int) { return ok(r), []int{good.Fd(), good.Fd(), bitmap} }, errSigMalformed},
		{"stream signal socket", func(r wireMsg) ([]byte, []int) { return ok(r), []int{good.Fd(), seq[1], bitmap} }, errSigMalformed},
		{"socket for the bitmap", func(r wireMsg) ([]byte, []int) { return ok(r), []int{good.Fd(), sock, sock} }, errSigMalformed},
		{"unsealed bitmap", func(r wireMsg) ([]byte, []int) { return ok(r), []int{good.Fd(), sock, unsealed} }, shm.ErrNotSealed},
		{"index past a one-page bitmap", func(r wireMsg) ([]byte, []int) {
			return at(uint32(sigMaxIndex(os.Getpagesize())), 0)(r), []int{good.Fd(), sock, page}
		}, nil},
		{"two fds", func(r wireMsg) ([]byte, []int) { return ok(r), []int{good.Fd(), sock} }, errSigMalformed},
		{"one fd", func(r wireMsg) ([]byte, []int) { return ok(r), []int{good.Fd()} }, errSigMalformed},
		{"no fds", func(r wireMsg) ([]byte, []int) { return ok(r), nil }, errSigMalformed},
		{"other token", func(r wireMsg) ([]byte, []int) {
			return wireMsg{op: statusOK, token: r.token + 1, size: r.size}.marshal(), []int{good.Fd(), sock, bitmap}
		}, nil},
		{"other size", func(r wireMsg) ([]byte, []int) {
			return wireMsg{op: statusOK, token: r.token, size: r.size * 2}.marshal(), []int{good.Fd(), sock, bitmap}
		}, nil},
		{"NoDMB with fds", func(r wireMsg) ([]byte, []int) {
			return wireMsg{op: statusNoDMB, token: r.token}.marshal(), []int{good.Fd(), sock, bitmap}
		}, ErrNoDMB},
		{"four fds", func(r wireMsg) ([]byte, []int) { return ok(r), []int{good.Fd(), sock, bitmap, sock} }, ErrUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openTestDevice(t)
			attaching := false
			var mu sync.Mutex
			f := newFakeDevice(t, func(req wireMsg) ([]byte, []int) {
				mu.Lock()
				defer mu.Unlock()
				if req.op == opAttach && attaching {
					return tc.reply(req)
				}
				return wireMsg{op: statusOK}.marshal(), nil
			})
			// Connect first, so the baseline counts the device-to-device connection.
			require.NoError(t, d.QueryRemoteGID(f.gid))
			mu.Lock()
			attaching = true
			mu.Unlock()
			fds, err := shm.CountMappings("hostile-")
			require.NoError(t, err)
			base := countFDs(t)
			r, err := d.AttachDMB(f.gid, 0x1234, size)
			if err == nil {
				r.Detach()
			}
			require.Error(t, err, "AttachDMB accepted the reply")
			if tc.reason != nil {
				assert.ErrorIs(t, err, tc.reason, "AttachDMB")
			}
			// A broken exchange drops the connection (and the redialled one): once the
			// fake device has seen both hang up, compare without the first.
			if errors.Is(err, ErrUnreachable) {
				f.waitIdle()
				base -= 2
			}
			assert.Equal(t, base, countFDs(t), "open fds: a received descriptor leaked")
			maps, err := shm.CountMappings("hostile-")
			require.NoError(t, err)
			assert.Equal(t, fds, maps, "mappings of the fake's memfds")
			assert.Zero(t, d.Stats().AttachesMade, "attaches made after a refused attach")
		})
	}
}

// TestHungPeerDevice: a device that accepts but never answers costs a bounded wait: two
// attempts, each ended by the exchange timeout.
func TestHungPeerDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the exchange timeout twice")
	}
	d := openTestDevice(t)
	f := newFakeDevice(t, func(wireMsg) ([]byte, []int) { return nil, nil })
	start := time.Now()
	err := d.QueryRemoteGID(f.gid)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrUnreachable, "QueryRemoteGID of a mute device")
	assert.Equal(t, 2, f.acceptCount(), "attempts on the mute device")
	assert.GreaterOrEqual(t, took, exchangeTimeout, "given up before the exchange timeout")
}

// dialDevice connects to d's socket as a peer device would, by hand.
func dialDevice(t *testing.T, d *Device) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: d.gid.socketName(), Net: "unixpacket"})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func roundTripRaw(t *testing.T, c *net.UnixConn, req []byte) (wireMsg, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		return wireMsg{}, err
	}
	buf := make([]byte, 64)
	n, fds, err := shm.RecvFds(c, buf, 3)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		return wireMsg{}, err
	}
	return parseWire(buf[:n])
}

func TestDeviceAnswersRawRequests(t *testing.T) {
	d := openTestDevice(t)
	var events []GID
	var mu sync.Mutex
	d.SetEventHandler(func(from GID, _ uint32, _ uint64) { mu.Lock(); events = append(events, from); mu.Unlock() })

	// A sender GID that the asking process does not listen on: dropped unanswered.
	c := dialDevice(t, d)
	_, err := roundTripRaw(t, c, wireMsg{op: opQuery, from: GID{1, 1}}.marshal())
	require.Error(t, err, "a claim the asker cannot back was answered")

	// This process does listen on d's name, so it may speak as d.
	c = dialDevice(t, d)
	rep, err := roundTripRaw(t, c, wireMsg{op: 99, from: d.GID()}.marshal())
	require.NoError(t, err)
	assert.Equal(t, uint16(statusBadOp), rep.op, "unknown op")
	// Later requests on the connection count as from the verified sender, whatever
	// they name.
	rep, err = roundTripRaw(t, c, wireMsg{op: opEvent, size: EventShutdown, from: GID{1, 1}}.marshal())
	require.NoError(t, err)
	assert.Equal(t, uint16(statusOK), rep.op, "event")
	mu.Lock()
	assert.Equal(t, []GID{d.GID()}, events)
	mu.Unlock()

	// Garbage ends that connection only.
	bad := wireMsg{op: opQuery, from: d.GID()}.marshal()
	bad[5] = 9
	_, err = roundTripRaw(t, c, bad)
	require.Error(t, err, "the device answered a message of another version")
	c2 := dialDevice(t, d)
	rep, err = roundTripRaw(t, c2, wireMsg{op: opQuery, from: d.GID()}.marshal())
	require.NoError(t, err, "query after another peer's garbage")
	assert.Equal(t, uint16(statusOK), rep.op)
}

// TestPeerThatNeverReadsDoesNotWedgeDevice: a peer device that sends attach requests and
// never reads the replies must not stop the owner from using its own device.
func TestPeerThatNeverReadsDoesNotWedgeDevice(t *testing.T) {
	d, err := Open(Config{})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	m, err := d.RegisterDMB(MinDMBSize)
	require.NoError(t, err)
	c := dialDevice(t, d) // closed before the device by the cleanup order
	req := wireMsg{op: opAttach, token: m.Token(), size: MinDMBSize, from: d.GID()}.marshal()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	sent := 0
	for ; sent < 1_000_000; sent++ {
		if _, err := c.Write(req); err != nil {
			break
		}
	}
	t.Logf("%d requests sent before the device stopped reading", sent)

	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Stats()
		if m2, err := d.RegisterDMB(MinDMBSize); err == nil {
			d.UnregisterDMB(m2)
		}
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Errorf("Stats/RegisterDMB blocked for 3s behind a peer that does not read its replies " +
			"(the attach reply is sent while the device lock is held)")
	}
	c.Close() // lets the stuck reply fail, so the device can be closed
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("device still blocked after the peer hung up")
	}
	closed := make(chan struct{})
	go func() { d.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked")
	}
}

// TestPeerGoneEvent: when a device that talked to us goes away, its connection to us
// ends; the handler hears EventPeerGone from it and our own connection to it is dropped.
// A device we only talked to (it never connected to us) is seen going away by the peer
// watch, through the end of our connection to it. Our own Close raises nothing.
func TestPeerGoneEvent(t *testing.T) {
	type event struct {
		from GID
		code uint32
		info uint64
	}
	a, b, c := openTestDevice(t), openTestDevice(t), openTestDevice(t)
	events := make(chan event, 10)
	a.SetEventHandler(func(from GID, code uint32, info uint64) { events <- event{from, code, info} })
	bEvents := make(chan event, 10)
	b.SetEventHandler(func(from GID, code uint32, info uint64) { bEvents <- event{from, code, info} })

	require.NoError(t, b.QueryRemoteGID(a.gid)) // b connects to a
	require.NoError(t, a.QueryRemoteGID(b.gid)) // and a to b
	require.NoError(t, a.QueryRemoteGID(c.gid)) // a connects to c; c never to a
	c.Close()
	b.Close()
	// Close has joined b's serving goroutines: had b raised anything, it would be here.
	select {
	case ev := <-bEvents:
		t.Errorf("the closing device's own handler saw %+v", ev)
	default:
	}

	gone := map[GID]bool{}
	deadline := time.After(10 * time.Second)
	for !gone[b.gid] || !gone[c.gid] {
		select {
		case ev := <-events:
			require.Equal(t, uint32(EventPeerGone), ev.code, "event %+v", ev)
			require.Contains(t, []GID{b.gid, c.gid}, ev.from, "event %+v from a device still there", ev)
			gone[ev.from] = true
		case <-deadline:
			t.Fatalf("EventPeerGone within 10s from b: %v, from c: %v", gone[b.gid], gone[c.gid])
		}
	}
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		_, kb := a.peers[b.gid]
		_, kc := a.peers[c.gid]
		return !kb && !kc
	}, 10*time.Second, time.Millisecond, "a still keeps a connection entry for a vanished device")
}

// errOf is the error of a call that returns a value and an error.
func errOf[T any](_ T, err error) error { return err }
