package ism_test

import (
	"bytes"
	"errors"
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
		if err := q.from.QueryRemoteGID(q.to.GID()); err != nil {
			t.Errorf("%s: QueryRemoteGID of a live device: %v", q.name, err)
		}
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
			t.Errorf("%s: AttachDMB succeeded", tc.name)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: AttachDMB = %v, want %v", tc.name, err, tc.want)
		}
		if tc.want == nil && errors.Is(err, ism.ErrNoDMB) {
			t.Errorf("%s: AttachDMB = %v; the token exists, only the size is wrong", tc.name, err)
		}
	}
	if st := peer.Stats(); st.AttachesMade != 0 {
		t.Errorf("peer counted %d attaches after refusals only", st.AttachesMade)
	}
	if st := owner.Stats(); st.AttachesServed != 0 {
		t.Errorf("owner counted %d attaches served after refusals only", st.AttachesServed)
	}
}

func TestAttachMapsTheSameMemory(t *testing.T) {
	owner := openDevice(t, ism.Config{})
	peer := openDevice(t, ism.Config{})
	m := register(t, owner, 64<<10)
	r := attach(t, peer, owner, m)

	if r.Token() != m.Token() || r.Size() != m.Size() || len(r.Bytes()) != m.Size() {
		t.Fatalf("remote: token %#x size %d len %d; want %#x, %d", r.Token(), r.Size(), len(r.Bytes()), m.Token(), m.Size())
	}
	if &r.Bytes()[0] == &m.Bytes()[0] {
		t.Fatal("the remote DMB is the owner's slice, not a mapping of its own")
	}
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
		if bell.check.TryConsume() {
			t.Fatalf("%s: rung before the test rang it", bell.name)
		}
		if err := bell.ring.Ring(); err != nil {
			t.Fatalf("%s: Ring: %v", bell.name, err)
		}
		if !bell.check.TryConsume() {
			t.Errorf("%s: ring not seen", bell.name)
		}
	}
	if m.Data.TryConsume() || m.Space.TryConsume() {
		t.Error("a doorbell is still rung after being consumed")
	}
	// The attacher's ring of Data wakes Data alone.
	require.NoError(t, r.Data.Ring())
	assert.False(t, m.Space.TryConsume(), "a data ring woke the space bell")
	assert.True(t, m.Data.TryConsume(), "a data ring did not wake the data bell")

	// A second attachment is a separate mapping of the same memory.
	r2 := attach(t, peer, owner, m)
	r2.Bytes()[5] = 0xEE
	if r.Bytes()[5] != 0xEE || m.Bytes()[5] != 0xEE {
		t.Fatal("second attachment does not share memory with the first")
	}
	r2.Detach()
	r2.Detach() // idempotent
	if r2.Bytes() != nil {
		t.Error("Bytes of a detached DMB is not nil")
	}
	if r.Bytes()[5] != 0xEE {
		t.Error("detaching one attachment disturbed the other")
	}

	if st := owner.Stats(); st.AttachesServed != 2 {
		t.Errorf("owner AttachesServed = %d, want 2", st.AttachesServed)
	}
	if st := peer.Stats(); st.AttachesMade != 2 || st.AttachesServed != 0 {
		t.Errorf("peer stats %+v, want AttachesMade 2", st)
	}

	// Unregistering on the owner does not pull the memory from under the peer.
	owner.UnregisterDMB(m)
	r.Bytes()[7] = 0x77
	if r.Bytes()[5] != 0xEE || r.Bytes()[7] != 0x77 {
		t.Error("the attacher's mapping changed after the owner unregistered")
	}
	assert.ErrorIs(t, errOf(peer.AttachDMB(owner.GID(), m.Token(), m.Size())), ism.ErrNoDMB, "attach after UnregisterDMB")
}

// TestAttachOwnDMB: a process whose dialer and listener share one device attaches its
// own DMBs through the same socket path.
func TestAttachOwnDMB(t *testing.T) {
	d := openDevice(t, ism.Config{})
	m := register(t, d, ism.MinDMBSize)
	r := attach(t, d, d, m)
	require.NoError(t, r.MoveData(100, []byte("loop"), true))
	if string(m.Bytes()[100:104]) != "loop" || !m.Data.TryConsume() {
		t.Fatal("self-attached DMB does not reach the owner")
	}
	if st := d.Stats(); st.AttachesMade != 1 || st.AttachesServed != 1 {
		t.Errorf("stats %+v, want one attach made and served", st)
	}
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
		if err == nil {
			t.Errorf("%s: MoveData(%d, %d bytes) accepted", tc.name, tc.offset, tc.n)
		}
		if j := checkPattern(m.Bytes(), 0, 0x33); j >= 0 {
			t.Fatalf("%s: refused MoveData changed byte %d", tc.name, j)
		}
		if m.Data.TryConsume() {
			t.Errorf("%s: refused MoveData rang the doorbell", tc.name)
		}
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
		if err := r.MoveData(tc.offset, p, tc.signal); err != nil {
			t.Errorf("%s: MoveData(%d, %d bytes): %v", tc.name, tc.offset, tc.n, err)
			continue
		}
		mem := m.Bytes()
		if !bytes.Equal(mem[tc.offset:tc.offset+tc.n], p) {
			t.Errorf("%s: the owner does not see the moved bytes", tc.name)
		}
		if j := checkPattern(mem[:tc.offset], 0, 0x33); j >= 0 {
			t.Errorf("%s: byte %d before the span changed", tc.name, j)
		}
		if j := checkPattern(mem[tc.offset+tc.n:], tc.offset+tc.n, 0x33); j >= 0 {
			t.Errorf("%s: byte %d after the span changed", tc.name, j)
		}
		if got := m.Data.TryConsume(); got != tc.signal {
			t.Errorf("%s: owner's data doorbell rung = %v, want %v", tc.name, got, tc.signal)
		}
		if m.Space.TryConsume() {
			t.Errorf("%s: MoveData rang the space doorbell", tc.name)
		}
	}

	// The owner blocked in Wait is woken by a signalled MoveData.
	m.Data.SetDeadline(time.Now().Add(10 * time.Second))
	woke := make(chan error, 1)
	go func() { woke <- m.Data.Wait() }()
	shmtest.WaitParkedIn(t, "[select", "ism.(*Bell).Wait(")
	require.NoError(t, r.MoveData(32, []byte("wake up"), true))
	require.NoError(t, <-woke, "owner's Wait")
	if string(m.Bytes()[32:39]) != "wake up" {
		t.Fatalf("owner woke to %q", m.Bytes()[32:39])
	}

	// A detached DMB refuses MoveData instead of touching unmapped memory.
	r.Detach()
	if err := r.MoveData(0, []byte{1}, false); err == nil {
		t.Error("MoveData on a detached DMB accepted")
	}
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
	mu.Lock()
	if len(got) != len(sent) {
		t.Fatalf("handler saw %d events, want %d: %+v", len(got), len(sent), got)
	}
	for i, s := range sent {
		if got[i] != s.ev {
			t.Errorf("event %d = %+v, want %+v", i, got[i], s.ev)
		}
	}
	mu.Unlock()

	// Events go to the device they are sent to, and the handler can be removed.
	require.NoError(t, rx.SignalEvent(s1.GID(), 9, 9))
	rx.SetEventHandler(nil)
	require.NoError(t, s2.SignalEvent(rx.GID(), 7, 7), "SignalEvent after the handler was removed")
	mu.Lock()
	if len(got) != len(sent) {
		t.Errorf("handler saw %d events, want %d", len(got), len(sent))
	}
	mu.Unlock()

	assert.ErrorIs(t, s1.SignalEvent(randomGID(t), ism.EventShutdown, 0), ism.ErrUnreachable, "SignalEvent to a random GID")
}

// TestNoLeakAfterCycles: register, attach, move, detach and unregister a hundred times;
// every fd and every mapping is given back.
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

func TestNoLeakAfterCycles(t *testing.T) {
	fds0, maps0 := settledFDs(t), dmbMappings(t)
	owner := openDevice(t, ism.Config{})
	peer := openDevice(t, ism.Config{})
	cycle := func(i int) {
		m, err := owner.RegisterDMB(ism.MinDMBSize << (i % 3))
		if err != nil {
			t.Fatalf("cycle %d: RegisterDMB: %v", i, err)
		}
		r, err := peer.AttachDMB(owner.GID(), m.Token(), m.Size())
		if err != nil {
			t.Fatalf("cycle %d: AttachDMB: %v", i, err)
		}
		if err := r.MoveData(0, []byte{byte(i)}, true); err != nil || m.Bytes()[0] != byte(i) || !m.Data.TryConsume() {
			t.Fatalf("cycle %d: MoveData: %v", i, err)
		}
		r.Detach()
		owner.UnregisterDMB(m)
	}
	cycle(0) // opens the device-to-device connection, kept for reuse
	fds, maps := settledFDs(t), dmbMappings(t)
	for i := 1; i <= 100; i++ {
		cycle(i)
	}
	if got := settledFDs(t); got != fds {
		t.Errorf("open fds %d -> %d after 100 cycles", fds, got)
	}
	if got := dmbMappings(t); got != maps {
		t.Errorf("DMB mappings %d -> %d after 100 cycles", maps, got)
	}
	if st := owner.Stats(); st.DMBsRegistered != 0 || st.DMBsCreated != 101 || st.AttachesServed != 101 {
		t.Errorf("owner stats %+v", st)
	}

	// Closing both devices gives back their sockets and connections as well.
	owner.Close()
	peer.Close()
	if got := settledFDs(t); got != fds0 {
		t.Errorf("open fds %d before opening the devices, %d after closing them", fds0, got)
	}
	if got := dmbMappings(t); got != maps0 {
		t.Errorf("DMB mappings %d before opening the devices, %d after closing them", maps0, got)
	}
}
