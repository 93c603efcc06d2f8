package ism_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/shm/shmtest"
)

func TestQueryRemoteGID(t *testing.T) {
	a := openDevice(t, ism.Config{})
	b := openDevice(t, ism.Config{})
	for _, q := range []struct {
		name     string
		from, to *ism.Device
	}{{"a->b", a, b}, {"b->a", b, a}, {"a->a", a, a}} {
		assert.NoError(t, q.from.QueryRemoteGID(q.to.GID()), "%s: QueryRemoteGID of a live device", q.name)
	}
	assert.ErrorIs(t, a.QueryRemoteGID(randomGID(t)), ism.ErrUnreachable, "QueryRemoteGID of a random GID")
	assert.ErrorIs(t, a.QueryRemoteGID(ism.GID{}), ism.ErrUnreachable, "QueryRemoteGID of the zero GID")

	// a holds a connection to b from the query above; closing b must still be noticed.
	b.Close()
	assert.ErrorIs(t, a.QueryRemoteGID(b.GID()), ism.ErrUnreachable, "QueryRemoteGID of a closed device")
	// A later device is reachable through the same querier.
	c := openDevice(t, ism.Config{})
	assert.NoError(t, a.QueryRemoteGID(c.GID()), "QueryRemoteGID of a new device")
}

func TestAttachRefusals(t *testing.T) {
	owner := openDevice(t, ism.Config{})
	peer := openDevice(t, ism.Config{})
	m := register(t, owner, 32<<10)
	own := register(t, peer, 32<<10)
	gone, err := owner.RegisterDMB(ism.MinDMBSize)
	require.NoError(t, err)
	owner.UnregisterDMB(gone)

	for _, tc := range []struct {
		name  string
		gid   ism.GID
		token uint64
		size  int
		want  error // nil: any error
	}{
		{"wrong token", owner.GID(), m.Token() ^ 1, m.Size(), ism.ErrNoDMB},
		{"zero token", owner.GID(), 0, m.Size(), ism.ErrNoDMB},
		{"unregistered token", owner.GID(), gone.Token(), ism.MinDMBSize, ism.ErrNoDMB},
		{"token of the attacher's own DMB", owner.GID(), own.Token(), own.Size(), ism.ErrNoDMB},
		{"smaller valid size", owner.GID(), m.Token(), ism.MinDMBSize, nil},
		{"larger valid size", owner.GID(), m.Token(), 64 << 10, nil},
		{"invalid size", owner.GID(), m.Token(), m.Size() + 4096, nil},
		{"unknown device", randomGID(t), m.Token(), m.Size(), ism.ErrUnreachable},
	} {
		r, err := peer.AttachDMB(tc.gid, tc.token, tc.size)
		if err == nil {
			r.Detach()
		}
		if !assert.Error(t, err, "%s: AttachDMB", tc.name) {
			continue
		}
		if tc.want != nil {
			assert.ErrorIs(t, err, tc.want, "%s: AttachDMB", tc.name)
		} else {
			assert.NotErrorIs(t, err, ism.ErrNoDMB, "%s: AttachDMB: the token exists, only the size is wrong", tc.name)
		}
	}
	assert.Zero(t, peer.Stats().AttachesMade, "peer's attaches made after refusals only")
	assert.Zero(t, owner.Stats().AttachesServed, "owner's attaches served after refusals only")
}

func TestAttachMapsTheSameMemory(t *testing.T) {
	owner := openDevice(t, ism.Config{})
	peer := openDevice(t, ism.Config{})
	m := register(t, owner, 64<<10)
	r := attach(t, peer, owner, m)

	require.Equal(t, m.Token(), r.Token(), "remote DMB's token")
	require.Equal(t, m.Size(), r.Size(), "remote DMB's size")
	require.Len(t, r.Bytes(), m.Size())
	require.NotSame(t, &m.Bytes()[0], &r.Bytes()[0], "the remote DMB is the owner's slice, not a mapping of its own")
	fill(m.Bytes(), 0x11)
	require.Equal(t, -1, checkPattern(r.Bytes(), 0, 0x11), "first byte where the attacher does not see the owner's write")
	fill(r.Bytes(), 0x22)
	require.Equal(t, -1, checkPattern(m.Bytes(), 0, 0x22), "first byte where the owner does not see the attacher's write")

	// The doorbells are shared too: the attacher rings, the owner consumes. The owner
	// rings its own doorbell too (a local wake-up); only the owner can consume.
	for _, bell := range []struct {
		name  string
		ring  interface{ Ring() error }
		check *ism.Bell
	}{
		{"Data attacher->owner", r.Data, m.Data},
		{"Space attacher->owner", r.Space, m.Space},
		{"Data owner->owner", m.Data, m.Data},
	} {
		require.False(t, bell.check.TryConsume(), "%s: rung before the test rang it", bell.name)
		require.NoError(t, bell.ring.Ring(), "%s: Ring", bell.name)
		assert.True(t, bell.check.TryConsume(), "%s: ring seen", bell.name)
	}
	assert.False(t, m.Data.TryConsume(), "the data doorbell is still rung after being consumed")
	assert.False(t, m.Space.TryConsume(), "the space doorbell is still rung after being consumed")
	// The attacher's ring of Data wakes Data alone.
	require.NoError(t, r.Data.Ring())
	assert.False(t, m.Space.TryConsume(), "a data ring woke the space bell")
	assert.True(t, m.Data.TryConsume(), "a data ring did not wake the data bell")

	// A second attachment is a separate mapping of the same memory.
	r2 := attach(t, peer, owner, m)
	r2.Bytes()[5] = 0xEE
	require.Equal(t, byte(0xEE), r.Bytes()[5], "second attachment shares memory with the first")
	require.Equal(t, byte(0xEE), m.Bytes()[5], "second attachment shares memory with the owner")
	r2.Detach()
	r2.Detach() // idempotent
	assert.Nil(t, r2.Bytes(), "Bytes of a detached DMB")
	assert.Equal(t, byte(0xEE), r.Bytes()[5], "detaching one attachment disturbed the other")

	assert.Equal(t, uint64(2), owner.Stats().AttachesServed, "owner's attaches served")
	assert.Equal(t, uint64(2), peer.Stats().AttachesMade, "peer's attaches made")
	assert.Zero(t, peer.Stats().AttachesServed, "peer's attaches served")

	// Unregistering on the owner does not pull the memory from under the peer.
	owner.UnregisterDMB(m)
	r.Bytes()[7] = 0x77
	assert.Equal(t, byte(0xEE), r.Bytes()[5], "the attacher's mapping after the owner unregistered")
	assert.Equal(t, byte(0x77), r.Bytes()[7], "a write to the attacher's mapping after the owner unregistered")
	assert.ErrorIs(t, errOf(peer.AttachDMB(owner.GID(), m.Token(), m.Size())), ism.ErrNoDMB, "attach after UnregisterDMB")
}

// TestAttachOwnDMB: a process whose dialer and listener share one device attaches its
// own DMBs through the same socket path.
func TestAttachOwnDMB(t *testing.T) {
	d := openDevice(t, ism.Config{})
	m := register(t, d, ism.MinDMBSize)
	r := attach(t, d, d, m)
	require.NoError(t, r.MoveData(100, []byte("loop"), true))
	require.Equal(t, "loop", string(m.Bytes()[100:104]), "self-attached DMB reaches the owner")
	require.True(t, m.Data.TryConsume(), "self-attached DMB rings the owner")
	assert.Equal(t, uint64(1), d.Stats().AttachesMade, "attaches made")
	assert.Equal(t, uint64(1), d.Stats().AttachesServed, "attaches served")
}

func TestMoveData(t *testing.T) {
	owner := openDevice(t, ism.Config{})
	peer := openDevice(t, ism.Config{})
	m := register(t, owner, ism.MinDMBSize)
	r := attach(t, peer, owner, m)
	size := m.Size()
	fill(m.Bytes(), 0x33)

	for _, tc := range []struct {
		name   string
		offset int
		n      int
	}{
		{"negative offset", -1, 1},
		{"very negative offset", -size, size},
		{"offset past the end", size + 1, 0},
		{"one byte past the end", size - 10, 11},
		{"longer than the DMB", 0, size + 1},
		{"offset at the end, one byte", size, 1},
	} {
		err := r.MoveData(tc.offset, bytes.Repeat([]byte{0xFF}, tc.n), true)
		assert.Error(t, err, "%s: MoveData(%d, %d bytes)", tc.name, tc.offset, tc.n)
		require.Equal(t, -1, checkPattern(m.Bytes(), 0, 0x33), "%s: first byte a refused MoveData changed", tc.name)
		assert.False(t, m.Data.TryConsume(), "%s: refused MoveData rang the doorbell", tc.name)
	}

	for _, tc := range []struct {
		name   string
		offset int
		n      int
		signal bool
	}{
		{"whole DMB", 0, size, true},
		{"last bytes", size - 5, 5, true},
		{"middle, silent", 1000, 3000, false},
		{"empty at the end", size, 0, true},
		{"first byte", 0, 1, false},
	} {
		fill(m.Bytes(), 0x33)
		p := make([]byte, tc.n)
		fill(p, 0x44)
		if !assert.NoError(t, r.MoveData(tc.offset, p, tc.signal), "%s: MoveData(%d, %d bytes)", tc.name, tc.offset, tc.n) {
			continue
		}
		mem := m.Bytes()
		assert.Equal(t, p, mem[tc.offset:tc.offset+tc.n], "%s: the moved bytes as the owner sees them", tc.name)
		assert.Equal(t, -1, checkPattern(mem[:tc.offset], 0, 0x33), "%s: first byte changed before the span", tc.name)
		assert.Equal(t, -1, checkPattern(mem[tc.offset+tc.n:], tc.offset+tc.n, 0x33), "%s: first byte changed after the span", tc.name)
		assert.Equal(t, tc.signal, m.Data.TryConsume(), "%s: owner's data doorbell rung", tc.name)
		assert.False(t, m.Space.TryConsume(), "%s: MoveData rang the space doorbell", tc.name)
	}

	// The owner blocked in Wait is woken by a signalled MoveData.
	m.Data.SetDeadline(time.Now().Add(10 * time.Second))
	woke := make(chan error, 1)
	go func() { woke <- m.Data.Wait() }()
	shmtest.WaitParkedIn(t, "[select", "ism.(*Bell).Wait(")
	require.NoError(t, r.MoveData(32, []byte("wake up"), true))
	require.NoError(t, <-woke, "owner's Wait")
	require.Equal(t, "wake up", string(m.Bytes()[32:39]), "what the owner woke to")

	// A detached DMB refuses MoveData instead of touching unmapped memory.
	r.Detach()
	assert.Error(t, r.MoveData(0, []byte{1}, false), "MoveData on a detached DMB")
}

func TestSignalEvent(t *testing.T) {
	rx := openDevice(t, ism.Config{})
	s1 := openDevice(t, ism.Config{})
	s2 := openDevice(t, ism.Config{})

	// Without a handler an event is accepted and dropped.
	require.NoError(t, s1.SignalEvent(rx.GID(), ism.EventShutdown, 1), "SignalEvent without a handler")

	type event struct {
		from ism.GID
		code uint32
		info uint64
	}
	var mu sync.Mutex
	var got []event
	rx.SetEventHandler(func(from ism.GID, code uint32, info uint64) {
		mu.Lock()
		got = append(got, event{from, code, info})
		mu.Unlock()
	})
	sent := []struct {
		from *ism.Device
		ev   event
	}{
		{s1, event{s1.GID(), ism.EventShutdown, 0x0000_0001_dead_beef}},
		{s2, event{s2.GID(), 0x1234_5678, ^uint64(0)}},
		{s1, event{s1.GID(), 0, 0}},
	}
	for _, s := range sent {
		require.NoError(t, s.from.SignalEvent(rx.GID(), s.ev.code, s.ev.info), "SignalEvent")
	}
	// SignalEvent returns once the receiver handled the event: no waiting needed.
	want := make([]event, len(sent))
	for i, s := range sent {
		want[i] = s.ev
	}
	mu.Lock()
	assert.Equal(t, want, got, "events the handler saw")
	mu.Unlock()

	// Events go to the device they are sent to, and the handler can be removed.
	require.NoError(t, rx.SignalEvent(s1.GID(), 9, 9))
	rx.SetEventHandler(nil)
	require.NoError(t, s2.SignalEvent(rx.GID(), 7, 7), "SignalEvent after the handler was removed")
	mu.Lock()
	assert.Len(t, got, len(sent), "events the handler saw")
	mu.Unlock()

	assert.ErrorIs(t, s1.SignalEvent(randomGID(t), ism.EventShutdown, 0), ism.ErrUnreachable, "SignalEvent to a random GID")
}

// settledFDs counts this process's open descriptors once the count holds still: the
// serving side of an attach closes what it sent a moment after the attacher returns, and
// the runtime opens and closes files of its own (cgroup CPU limits) now and then.
func settledFDs(t *testing.T) int {
	t.Helper()
	n := shmtest.OpenFDs(t)
	for same, end := 0, time.Now().Add(5*time.Second); same < 3 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
		if m := shmtest.OpenFDs(t); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// TestNoLeakAfterCycles: register, attach, move, detach and unregister a hundred times;
// every fd and every mapping is given back.
func TestNoLeakAfterCycles(t *testing.T) {
	fds0, maps0 := settledFDs(t), dmbMappings(t)
	owner := openDevice(t, ism.Config{})
	peer := openDevice(t, ism.Config{})
	cycle := func(i int) {
		m, err := owner.RegisterDMB(ism.MinDMBSize << (i % 3))
		require.NoError(t, err, "cycle %d: RegisterDMB", i)
		r, err := peer.AttachDMB(owner.GID(), m.Token(), m.Size())
		require.NoError(t, err, "cycle %d: AttachDMB", i)
		require.NoError(t, r.MoveData(0, []byte{byte(i)}, true), "cycle %d: MoveData", i)
		require.Equal(t, byte(i), m.Bytes()[0], "cycle %d: the moved byte", i)
		require.True(t, m.Data.TryConsume(), "cycle %d: the data doorbell", i)
		r.Detach()
		owner.UnregisterDMB(m)
	}
	cycle(0) // opens the device-to-device connection, kept for reuse
	fds, maps := settledFDs(t), dmbMappings(t)
	for i := 1; i <= 100; i++ {
		cycle(i)
	}
	assert.Equal(t, fds, settledFDs(t), "open fds after 100 cycles")
	assert.Equal(t, maps, dmbMappings(t), "DMB mappings after 100 cycles")
	st := owner.Stats()
	assert.Zero(t, st.DMBsRegistered, "owner's DMBs registered")
	assert.Equal(t, uint64(101), st.DMBsCreated, "owner's DMBs created")
	assert.Equal(t, uint64(101), st.AttachesServed, "owner's attaches served")

	// Closing both devices gives back their sockets and connections as well.
	owner.Close()
	peer.Close()
	assert.Equal(t, fds0, settledFDs(t), "open fds after closing the devices, against before opening them")
	assert.Equal(t, maps0, dmbMappings(t), "DMB mappings after closing the devices, against before opening them")
}
