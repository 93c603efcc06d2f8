package smcd_test

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
	"github.com/smcloop/smcloop/ism"
	"github.com/smcloop/smcloop/smcd"
)

// counts are the counters these tests follow: the backend-neutral ones and SMC-D's
// move_data calls.
type counts struct{ RingsSent, RingsSuppressed, Sleeps, MoveDataCalls uint64 }

func countsOf(l *smcd.Link) counts {
	c := l.Counters()
	return counts{c.RingsSent, c.RingsSuppressed, c.Sleeps, l.MoveDataCalls()}
}

// countersDelta is after - before.
func countersDelta(before, after counts) counts {
	return counts{
		RingsSent:       after.RingsSent - before.RingsSent,
		RingsSuppressed: after.RingsSuppressed - before.RingsSuppressed,
		Sleeps:          after.Sleeps - before.Sleeps,
		MoveDataCalls:   after.MoveDataCalls - before.MoveDataCalls,
	}
}

func TestLinkInitAndCursorWords(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, 32<<10, 64<<10, false)

	// Init writes the type into the PEER's CDC area (A's Init into B's DMB and vice versa).
	for _, m := range []*ism.DMB{c.rxA, c.rxB} {
		if typ := area(t, m.Bytes()).Type(); typ != cdc.MsgType {
			t.Errorf("DMB type byte %#x, want %#x", typ, cdc.MsgType)
		}
	}
	if len(c.la.RxRing()) != c.rxA.Size()-cdc.AreaSize || len(c.la.TxBuf()) != c.rxB.Size()-cdc.AreaSize {
		t.Errorf("A: rx ring %d, tx buffer %d; want %d, %d",
			len(c.la.RxRing()), len(c.la.TxBuf()), c.rxA.Size()-cdc.AreaSize, c.rxB.Size()-cdc.AreaSize)
	}

	// The core's host-form cursors become the DMB's packed words and back.
	prod := word(12345, 0)
	c.la.PushProd(cur(12345), 0, 0)
	if got := area(t, c.rxB.Bytes()).LoadProd(); got != prod {
		t.Errorf("B's DMB producer word %#x, want %#x", got, prod)
	}
	if got := c.lb.PeerProd(); got != cur(12345) {
		t.Errorf("B.PeerProd = %v, want %v", got, cur(12345))
	}
	if got := area(t, c.rxA.Bytes()).LoadProd(); got != 0 {
		t.Errorf("A's own DMB producer word %#x; PushProd wrote the wrong DMB", got)
	}

	consW := cdc.PackWord(cur(777), cdc.WriteBlocked, cdc.PeerDoneWriting)
	c.lb.PublishCons(datapath.Cons{Cursor: cur(777), ProdFlags: cdc.WriteBlocked, ConnFlags: cdc.PeerDoneWriting}, datapath.Writer)
	if got, want := c.la.PeerCons(), (datapath.Cons{Cursor: cur(777), ProdFlags: cdc.WriteBlocked, ConnFlags: cdc.PeerDoneWriting}); got != want {
		t.Errorf("A.PeerCons = %+v, want %+v", got, want)
	}
	if got := c.la.LocalArea().LoadCons(); got != consW {
		t.Errorf("A.LocalArea().LoadCons = %#x, want %#x", got, consW)
	}
	if got := area(t, c.rxB.Bytes()).LoadCons(); got != 0 {
		t.Errorf("B's own consumer word %#x; PublishCons wrote the wrong DMB", got)
	}
}

func TestAnnounceRetract(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)
	// B's wake word as A sees it: the word A's PushProd/PublishCons consult.
	wake := area(t, c.rxB.Bytes()).LoadWake
	const R, W, E = cdc.WakeReader, cdc.WakeWriter, cdc.WakeEpoch

	steps := []struct {
		name string
		do   func()
		want uint64
	}{
		{"start", func() {}, 0},
		{"announce reader", func() { c.lb.Announce(datapath.Reader) }, R | 1*E},
		{"announce writer", func() { c.lb.Announce(datapath.Writer) }, R | W | 2*E},
		{"retract reader", func() { c.lb.Retract(datapath.Reader) }, W | 2*E},
		{"retract reader again", func() { c.lb.Retract(datapath.Reader) }, W | 2*E},
		{"retract writer", func() { c.lb.Retract(datapath.Writer) }, 2 * E},
		{"announce reader", func() { c.lb.Announce(datapath.Reader) }, R | 3*E},
		{"retract reader", func() { c.lb.Retract(datapath.Reader) }, 3 * E},
	}
	for _, s := range steps {
		s.do()
		if got := wake(); got != s.want {
			t.Fatalf("%s: wake word %#x, want %#x", s.name, got, s.want)
		}
		if got := c.lb.LocalArea().LoadWake(); got != s.want {
			t.Fatalf("%s: B.LocalArea wake word %#x, want %#x", s.name, got, s.want)
		}
	}
	if got := area(t, c.rxA.Bytes()).LoadWake(); got != 0 {
		t.Errorf("B's announcements reached A's DMB: %#x", got)
	}
}

func TestPushProdRingsSleepingReaderOncePerSleep(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)
	dataRung := c.rxB.Data.TryConsume
	spaceRung := c.rxB.Space.TryConsume
	n := uint32(0)
	push := func() { n++; c.la.PushProd(cur(n), 0, 0) }

	steps := []struct {
		name   string
		do     func()
		ring   bool // B's data doorbell rung by this step
		counts counts
	}{
		{"reader awake", push, false, counts{RingsSuppressed: 1}},
		{"reader announces", func() { c.lb.Announce(datapath.Reader) }, false, counts{}},
		{"first push of the sleep", push, true, counts{RingsSent: 1}},
		{"second push, same sleep", push, false, counts{RingsSuppressed: 1}},
		{"third push, same sleep", push, false, counts{RingsSuppressed: 1}},
		{"reader retracts", func() { c.lb.Retract(datapath.Reader) }, false, counts{}},
		{"push after retract", push, false, counts{RingsSuppressed: 1}},
		{"reader sleeps again", func() { c.lb.Announce(datapath.Reader) }, false, counts{}},
		{"first push of the new sleep", push, true, counts{RingsSent: 1}},
		{"second push of the new sleep", push, false, counts{RingsSuppressed: 1}},
		{"reader retracts", func() { c.lb.Retract(datapath.Reader) }, false, counts{}},
		{"only the writer sleeps", func() { c.lb.Announce(datapath.Writer) }, false, counts{}},
		{"push with only the writer asleep", push, false, counts{RingsSuppressed: 1}},
	}
	for _, s := range steps {
		before := countsOf(c.la)
		s.do()
		if got := countersDelta(before, countsOf(c.la)); got != s.counts {
			t.Errorf("%s: counters moved by %+v, want %+v", s.name, got, s.counts)
		}
		if got := dataRung(); got != s.ring {
			t.Errorf("%s: B's data doorbell rung = %v, want %v", s.name, got, s.ring)
		}
		if spaceRung() {
			t.Errorf("%s: PushProd rang B's space doorbell", s.name)
		}
		if got := c.lb.PeerProd(); got != cur(n) {
			t.Errorf("%s: B sees producer cursor %v, want %v", s.name, got, cur(n))
		}
	}
	if c.rxA.Data.TryConsume() || c.rxA.Space.TryConsume() {
		t.Error("A's own doorbells were rung")
	}
}

func TestPublishConsRingsSleepingWriterOncePerSleep(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)
	n := uint32(0)
	publish := func(wake datapath.Dir) func() {
		return func() { n++; c.lb.PublishCons(cons(n, 0), wake) }
	}
	// B publishes its consumer cursor into A's DMB; A's writer is the sleeper.
	steps := []struct {
		name        string
		do          func()
		data, space bool // A's doorbells rung by this step
		counts      counts
	}{
		{"writer awake", publish(datapath.Writer), false, false, counts{RingsSuppressed: 1}},
		{"writer announces", func() { c.la.Announce(datapath.Writer) }, false, false, counts{}},
		{"first publication of the sleep", publish(datapath.Writer), false, true, counts{RingsSent: 1}},
		{"second publication", publish(datapath.Writer), false, false, counts{RingsSuppressed: 1}},
		{"publication that wakes nobody", publish(0), false, false, counts{RingsSuppressed: 1}},
		{"reader-only wake with the writer asleep", publish(datapath.Reader), false, false, counts{RingsSuppressed: 1}},
		{"writer retracts", func() { c.la.Retract(datapath.Writer) }, false, false, counts{}},
		{"publication after retract", publish(datapath.Writer), false, false, counts{RingsSuppressed: 1}},
		{"both sleep", func() { c.la.Announce(datapath.Reader); c.la.Announce(datapath.Writer) }, false, false, counts{}},
		{"close flags wake both", publish(datapath.Reader | datapath.Writer), true, true, counts{RingsSent: 2}},
		{"again, same sleeps", publish(datapath.Reader | datapath.Writer), false, false, counts{RingsSuppressed: 2}},
	}
	for _, s := range steps {
		before := countsOf(c.lb)
		s.do()
		if got := countersDelta(before, countsOf(c.lb)); got != s.counts {
			t.Errorf("%s: counters moved by %+v, want %+v", s.name, got, s.counts)
		}
		if got := c.rxA.Data.TryConsume(); got != s.data {
			t.Errorf("%s: A's data doorbell rung = %v, want %v", s.name, got, s.data)
		}
		if got := c.rxA.Space.TryConsume(); got != s.space {
			t.Errorf("%s: A's space doorbell rung = %v, want %v", s.name, got, s.space)
		}
		if got := c.la.PeerCons(); got != cons(n, 0) {
			t.Errorf("%s: A sees consumer %+v, want %+v", s.name, got, cons(n, 0))
		}
	}
}

func TestCopyModeMovesBytesOnPush(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, 32<<10, true)
	ring := c.rxB.Bytes()[cdc.AreaSize:]
	size := len(ring)
	tx := c.la.TxBuf()
	if len(tx) != size {
		t.Fatalf("copy-mode send buffer %d bytes, want the peer ring's %d", len(tx), size)
	}
	c.lb.Announce(datapath.Reader) // a non-zero wake word that a stray copy would clobber
	cdcBefore := bytes.Clone(c.rxB.Bytes()[:cdc.AreaSize])

	// Writing the send buffer does not touch the peer's DMB.
	copy(tx[100:], "hello, peer")
	if bytes.Contains(c.rxB.Bytes(), []byte("hello")) {
		t.Fatal("copy mode: the send buffer is the peer's DMB")
	}
	before := countsOf(c.la)
	c.la.PushProd(cur(11), 100, 11)
	if got := string(ring[100:111]); got != "hello, peer" {
		t.Fatalf("after PushProd the peer ring holds %q", got)
	}
	if d := countersDelta(before, countsOf(c.la)); d.MoveDataCalls != 1 || d.RingsSent != 1 {
		t.Errorf("one span: counters moved by %+v, want 1 move_data and 1 ring", d)
	}
	if !c.rxB.Data.TryConsume() {
		t.Error("the sleeping reader was not rung")
	}

	// A span that wraps: the last 100 bytes of the ring, then 200 from its start.
	clear(ring)
	for i := range tx {
		tx[i] = byte(i%251) + 1
	}
	off, n := size-100, 300
	before = countsOf(c.la)
	c.la.PushProd(cur(12), off, n)
	if d := countersDelta(before, countsOf(c.la)); d.MoveDataCalls != 2 {
		t.Errorf("wrapping span: %d move_data calls, want 2", d.MoveDataCalls)
	}
	if !bytes.Equal(ring[off:], tx[off:]) {
		t.Error("wrapping span: the tail of the ring differs from the send buffer")
	}
	if !bytes.Equal(ring[:200], tx[:200]) {
		t.Error("wrapping span: the head of the ring differs from the send buffer")
	}
	if i := firstNonZero(ring[200:off]); i >= 0 {
		t.Errorf("wrapping span: byte %d outside the span was written", 200+i)
	}
	cdcAfter := c.rxB.Bytes()[:cdc.AreaSize]
	if !bytes.Equal(cdcAfter[:cdc.OffProd], cdcBefore[:cdc.OffProd]) || !bytes.Equal(cdcAfter[cdc.OffCons:], cdcBefore[cdc.OffCons:]) {
		t.Errorf("the moves touched the CDC area: % x -> % x", cdcBefore, cdcAfter)
	}
	if got := c.lb.PeerProd(); got != cur(12) {
		t.Errorf("producer cursor %v, want %v", got, cur(12))
	}

	// An empty push publishes the cursor and moves nothing.
	before = countsOf(c.la)
	c.la.PushProd(cur(13), 5, 0)
	if d := countersDelta(before, countsOf(c.la)); d.MoveDataCalls != 0 {
		t.Errorf("empty push: %d move_data calls", d.MoveDataCalls)
	}
	// A span that ends exactly at the ring's end needs one move.
	before = countsOf(c.la)
	c.la.PushProd(cur(14), size-10, 10)
	if d := countersDelta(before, countsOf(c.la)); d.MoveDataCalls != 1 {
		t.Errorf("span ending at the ring's end: %d move_data calls, want 1", d.MoveDataCalls)
	}
}

func TestNoCopyModeWritesInPlace(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)
	ring := c.rxB.Bytes()[cdc.AreaSize:]
	tx := c.la.TxBuf()
	copy(tx[len(tx)-4:], "tail")
	if string(ring[len(ring)-4:]) != "tail" {
		t.Fatal("no-copy mode: the send buffer is not the peer's ring")
	}
	before := countsOf(c.la)
	c.la.PushProd(cur(4), len(tx)-4, 4)
	if d := countersDelta(before, countsOf(c.la)); d.MoveDataCalls != 0 {
		t.Errorf("no-copy PushProd made %d move_data calls", d.MoveDataCalls)
	}
	if got := c.lb.PeerProd(); got != cur(4) {
		t.Errorf("producer cursor %v, want %v", got, cur(4))
	}
}

func TestWaitDeadlineAndWakeLocal(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)

	for _, bit := range []datapath.Dir{datapath.Reader, datapath.Writer} {
		if err := c.lb.SetDeadline(bit, time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		before := countsOf(c.lb)
		if err := c.lb.Wait(bit); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Wait(%d) past the deadline: %v, want os.ErrDeadlineExceeded", bit, err)
		}
		if d := countersDelta(before, countsOf(c.lb)); d.Sleeps != 1 {
			t.Errorf("Wait(%d) counted %d sleeps", bit, d.Sleeps)
		}
		if err := c.lb.SetDeadline(bit, time.Now().Add(10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}

	// WakeLocal rings B's own doorbells, each only if its side announced sleep.
	c.lb.WakeLocal()
	if c.rxB.Data.TryConsume() || c.rxB.Space.TryConsume() {
		t.Error("WakeLocal rang with no local sleeper")
	}
	for _, s := range []struct {
		bit   datapath.Dir
		quiet *ism.Bell // the other side's doorbell, which must stay silent
	}{
		{datapath.Reader, c.rxB.Space},
		{datapath.Writer, c.rxB.Data},
	} {
		c.lb.Announce(s.bit)
		c.lb.WakeLocal()
		if s.quiet.TryConsume() {
			t.Errorf("WakeLocal with only sleeper %d rang the other doorbell", s.bit)
		}
		if err := c.lb.Wait(s.bit); err != nil {
			t.Errorf("Wait(%d) after WakeLocal: %v", s.bit, err)
		}
		c.lb.Retract(s.bit)
	}
	if c.rxA.Data.TryConsume() || c.rxA.Space.TryConsume() {
		t.Error("B's WakeLocal rang A")
	}

	// The reader's wait ends on the writer's push; the writer's on the reader's publication.
	c.lb.Announce(datapath.Reader)
	c.la.PushProd(cur(1), 0, 0)
	if err := c.lb.Wait(datapath.Reader); err != nil {
		t.Errorf("reader Wait after a push: %v", err)
	}
	c.lb.Retract(datapath.Reader)
	c.la.Announce(datapath.Writer)
	c.la.SetDeadline(datapath.Writer, time.Now().Add(10*time.Second))
	c.lb.PublishCons(cons(1, 0), datapath.Writer)
	if err := c.la.Wait(datapath.Writer); err != nil {
		t.Errorf("writer Wait after a publication: %v", err)
	}
	c.la.Retract(datapath.Writer)
}

// TestWakeLocalWithPeerClearedWakeWord: the wake word sits in the local DMB, which the
// peer maps read-write. A local wake-up (close, abort, peer death) must reach a local
// sleeper whatever the peer wrote there; otherwise a Read blocked without a deadline is
// never woken, and Conn.Close, which waits for that Read, never returns.
func TestWakeLocalWithPeerClearedWakeWord(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)
	c.lb.SetDeadline(datapath.Reader, time.Now().Add(2*time.Second))
	c.lb.Announce(datapath.Reader)
	// The peer (A) stores zero into B's wake word through its mapping of B's DMB.
	area(t, c.txA.Bytes()).AndWake(0)
	c.lb.WakeLocal()
	if err := c.lb.Wait(datapath.Reader); err != nil {
		t.Errorf("local reader not woken by WakeLocal after the peer cleared the wake word: %v "+
			"(WakeLocal decides from peer-writable shared memory)", err)
	}
	c.lb.Retract(datapath.Reader)
}

// sleepUntil waits for cond the way the connection core does: announce, re-check, wait,
// retract. A lost wake-up shows as the doorbell's deadline.
func sleepUntil(l *smcd.Link, bit datapath.Dir, cond func() bool) error {
	for !cond() {
		l.Announce(bit)
		if cond() {
			l.Retract(bit)
			return nil
		}
		err := l.Wait(bit)
		l.Retract(bit)
		if err != nil {
			return err
		}
	}
	return nil
}

// TestPingPongLosesNoWakeups: A pushes cursor i and sleeps until B has consumed it; B
// sleeps until cursor i arrives and publishes it consumed. Every step needs a wake-up
// across the link, so any doorbell wrongly suppressed stalls the exchange until the
// deadline.
func TestPingPongLosesNoWakeups(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)
	const rounds = 20000
	deadline := time.Now().Add(60 * time.Second)
	c.la.SetDeadline(datapath.Writer, deadline)
	c.lb.SetDeadline(datapath.Reader, deadline)

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { // A: writer
		defer wg.Done()
		for i := uint32(1); i <= rounds; i++ {
			c.la.PushProd(cur(i), 0, 0)
			want := cons(i, 0)
			if err := sleepUntil(c.la, datapath.Writer, func() bool { return c.la.PeerCons() == want }); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() { // B: reader
		defer wg.Done()
		for i := uint32(1); i <= rounds; i++ {
			if err := sleepUntil(c.lb, datapath.Reader, func() bool { return c.lb.PeerProd() == cur(i) }); err != nil {
				errs <- err
				return
			}
			c.lb.PublishCons(cons(i, 0), datapath.Writer)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		aA, aB := c.la.LocalArea(), c.lb.LocalArea()
		t.Logf("at the stall: A's area prod %#x cons %#x wake %#x, B's area prod %#x cons %#x wake %#x",
			aA.LoadProd(), aA.LoadCons(), aA.LoadWake(), aB.LoadProd(), aB.LoadCons(), aB.LoadWake())
		t.Fatalf("ping-pong stalled: %v (A %+v, B %+v)", err, c.la.Counters(), c.lb.Counters())
	}
	ca, cb := c.la.Counters(), c.lb.Counters()
	if ca.RingsSent == 0 || cb.RingsSent == 0 {
		t.Errorf("no doorbell was ever rung (A %+v, B %+v): the test did not exercise sleeping", ca, cb)
	}
	t.Logf("A %+v, B %+v", ca, cb)
}

func TestLinkCloseReturnsBuffersToTheGroup(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	rxA, rxB := getDMB(t, p.gA, 64<<10), getDMB(t, p.gB, ism.MinDMBSize)
	txA, err := p.gA.Attach(rxB.Token(), rxB.Size())
	if err != nil {
		t.Fatal(err)
	}
	la, err := smcd.New(p.gA, rxA, txA, true)
	if err != nil {
		t.Fatal(err)
	}
	before := smcd.Stats()
	la.Close(true)
	m := getDMB(t, p.gA, 64<<10)
	r, err := p.gA.Attach(rxB.Token(), rxB.Size())
	if err != nil {
		t.Fatal(err)
	}
	if m != rxA || r != txA {
		t.Error("the next connection did not get the closed link's buffers")
	}
	expectDelta(t, "reuse after Link.Close", before, smcd.BufferStats{RMBReuse: 1, PeerReuse: 1})
	p.gA.Release(r)
	p.gA.PutDMB(m, true)
	p.gB.PutDMB(rxB, true)
}

func TestViolationAndPeerLostTerminate(t *testing.T) {
	t.Run("violation tells the peer", func(t *testing.T) {
		p := newPair(t, ism.Config{}, ism.Config{})
		c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)
		before := smcd.Stats()
		c.la.Violation()
		if p.tA.Find(p.devB.GID(), smcd.RoleClient) != nil || p.tB.Find(p.devA.GID(), smcd.RoleServer) != nil {
			t.Error("a link group survived a protocol violation")
		}
		expectDelta(t, "Violation", before, smcd.BufferStats{Terminated: 2})
	})
	t.Run("peer lost ends both roles locally", func(t *testing.T) {
		p := newPair(t, ism.Config{}, ism.Config{})
		c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)
		server, err := p.tA.Create(p.devB.GID(), smcd.RoleServer, [4]byte{9, 9, 9, 9})
		if err != nil {
			t.Fatal(err)
		}
		before := smcd.Stats()
		c.la.PeerLost()
		if p.tA.Find(p.devB.GID(), smcd.RoleClient) != nil || p.tA.Find(p.devB.GID(), smcd.RoleServer) != nil {
			t.Error("a link group with the lost peer survived")
		}
		if _, _, err := server.GetDMB(ism.MinDMBSize, false); err == nil {
			t.Error("the server-role group with the lost peer still hands out DMBs")
		}
		if p.tB.Find(p.devA.GID(), smcd.RoleServer) != p.gB {
			t.Error("PeerLost signalled the peer it believes gone")
		}
		expectDelta(t, "PeerLost", before, smcd.BufferStats{Terminated: 2})
	})
}

// TestLinkLayoutAndName: what the core learns of the DMBs through datapath.Backend: both
// start with the CDC area, and a DMB that is not elastic has no commit unit.
func TestLinkLayoutAndName(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, 32<<10, 64<<10, false)
	assert.Equal(t, datapath.Layout{RxMemory: 32 << 10, TxMemory: 64 << 10, Header: cdc.AreaSize}, c.la.Layout())
	assert.Equal(t, datapath.Layout{RxMemory: 64 << 10, TxMemory: 32 << 10, Header: cdc.AreaSize}, c.lb.Layout())
	assert.Len(t, c.la.RxRing(), 32<<10-cdc.AreaSize)
	assert.Len(t, c.la.TxBuf(), 64<<10-cdc.AreaSize)
	assert.Equal(t, "SMCD", c.la.Name())
	assert.NoError(t, c.la.DecommitTx(0), "unit 0 holds the CDC area: never given back, no error")
}

// TestShortSleepMeasuresItsWakeUp: the peer's publication that wakes a short sleeper
// stamps the time of its wake call; the sleeper takes the delay into the process's
// measure of what a wake-up costs, once. Stamps a peer lies about are dropped.
func TestShortSleepMeasuresItsWakeUp(t *testing.T) {
	p := newPair(t, ism.Config{}, ism.Config{})
	c := newLinks(t, p, ism.MinDMBSize, ism.MinDMBSize, false)
	// sleep starts B's reader on a short sleep until want arrives and returns once it
	// sleeps (it found the cursor short and counted the sleep).
	sleep := func(want uint32) <-chan bool {
		before := c.lb.Counters().ShortSleeps
		done := make(chan bool, 1)
		go func() {
			done <- c.lb.ShortSleep(datapath.Reader, func() bool { return c.lb.PeerProd() == cur(want) }, time.Minute)
		}()
		for c.lb.Counters().ShortSleeps == before {
			runtime.Gosched()
		}
		return done
	}

	// A wake-up that took longer than MaxWakeSample (a loaded machine) is dropped too, so
	// the sleeper sleeps again, up to 20 times, until one is measured.
	var prod uint32
	for measured := false; !measured; {
		prod++
		require.LessOrEqual(t, prod, uint32(20), "no wake-up measured")
		samples := datapath.WakeSamples()
		done := sleep(prod)
		c.la.PushProd(cur(prod), 0, 0)
		require.True(t, <-done, "woken by the publication")
		taken := datapath.WakeSamples() - samples
		require.LessOrEqual(t, taken, uint64(1), "one wake-up, one sample at most")
		measured = taken == 1
	}
	assert.Positive(t, datapath.WakeCost())
	assert.LessOrEqual(t, datapath.WakeCost(), datapath.MaxWakeSample)
	assert.Equal(t, byte(cdc.MsgType), c.lb.LocalArea().Type(), "the stamp keeps the CDC message type")
	assert.Equal(t, uint64(prod), c.la.Counters().ShortWakes, "one futex wake per sleep")

	// A peer that writes its own stamp: an hour ahead, an hour ago, 3 ms ago, zero.
	now := time.Now().UnixNano()
	for _, lie := range []int64{now + int64(time.Hour), now - int64(time.Hour), now - 3*int64(time.Millisecond), 0} {
		samples := datapath.WakeSamples()
		done := sleep(prod + 1)
		a := c.lb.LocalArea()
		a.StoreStamp(lie)
		a.AndWake(^cdc.WakeReaderFutex)
		smcd.FutexWake(a.WakeFutex())
		assert.False(t, <-done, "woken, nothing to read")
		assert.Equal(t, samples, datapath.WakeSamples(), "stamp %d dropped", lie)
	}
}
