//go:build linux

package introspect

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testPID is a pid no process has (above pid_max's largest value, 2^22): names made
// from it can only be this test's.
const testPID = 1<<22 + 12345

func TestBucket(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, 0}, {1, 0}, {8 << 10, 0}, {8<<10 + 1, 1}, {16 << 10, 1}, {16<<10 + 1, 2}, {64 << 10, 3},
		{1 << 20, 7}, {1<<20 + 1, 8}, {1 << 30, 8},
	} {
		assert.Equal(t, c.want, Bucket(c.n), "Bucket(%d)", c.n)
	}
}

func TestParseUnixTable(t *testing.T) {
	table := `Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 10001 @smcloop-introspect-42
0000000000000000: 00000003 00000000 00000000 0001 03 10002 @smcloop-introspect-42
0000000000000000: 00000002 00000000 00010000 0001 01 10003 @smcloop-introspect-7
0000000000000000: 00000002 00000000 00000000 0001 01 10004 @smcloop-introspect-9
0000000000000000: 00000002 00000000 00010000 0001 01 10005 @smcloop-introspect-07
0000000000000000: 00000002 00000000 00010000 0001 01 10006 @smcloop-introspect-x
0000000000000000: 00000002 00000000 00010000 0001 01 10007 @smcloop-ism-0123
0000000000000000: 00000002 00000000 00010000 0001 01 10008 /run/smcloop-introspect-5
0000000000000000: 00000002 00000000 00010000 0005 01 10009
`
	assert.Equal(t, []int{7, 42}, parseUnixTable([]byte(table)))
}

func TestStatsAddSub(t *testing.T) {
	a := Stats{ConnsNow: 2, ClientSMC: 3, TxBytes: 10, RxSizes: Hist{1, 2}, Fallbacks: []Reason{{Code: 2, Name: "B", Client: 1}}}
	b := Stats{ConnsNow: 1, ClientSMC: 1, TxBytes: 5, RxSizes: Hist{0, 1}, Fallbacks: []Reason{{Code: 1, Name: "A", Server: 4}, {Code: 2, Name: "B", Client: 2}}}
	a.Add(&b)
	assert.Equal(t, Stats{ConnsNow: 3, ClientSMC: 4, TxBytes: 15, RxSizes: Hist{1, 3},
		Fallbacks: []Reason{{Code: 1, Name: "A", Server: 4}, {Code: 2, Name: "B", Client: 3}}}, a)
	a.Sub(&Stats{ClientSMC: 5, TxBytes: 15, RxSizes: Hist{1}, Fallbacks: []Reason{{Code: 2, Client: 1}, {Code: 9, Client: 1}}})
	assert.Equal(t, Stats{ConnsNow: 3, RxSizes: Hist{0, 3},
		Fallbacks: []Reason{{Code: 1, Name: "A", Server: 4}, {Code: 2, Name: "B", Client: 2}}}, a)
}

// TestStatsWaitsAndWakeCost: the wait counters add and subtract as the others; the
// wake-up cost and the share of slow wake-ups, moving averages, add as averages weighted
// by wake-ups and stay through a subtraction.
func TestStatsWaitsAndWakeCost(t *testing.T) {
	a := Stats{ReadWaits: Waits{Waits: 4, SpinHits: 3, LongSpins: 1}, WriteWaits: Waits{Waits: 2, RecheckHits: 2},
		DoorbellSleeps: 1, FutexSleeps: 2, FutexWakes: 3, WakeCostNs: 40_000, WakeSamples: 3, SlowWakes: 0.75}
	a.Add(&Stats{ReadWaits: Waits{Waits: 1, FutexHits: 1, FutexMisses: 2, Deadlines: 5}, WriteWaits: Waits{SpinMisses: 7, SpinSkips: 8},
		WakeCostNs: 8_000, WakeSamples: 1, SlowWakes: 0.25})
	want := Stats{
		ReadWaits:      Waits{Waits: 5, SpinHits: 3, LongSpins: 1, FutexHits: 1, FutexMisses: 2, Deadlines: 5},
		WriteWaits:     Waits{Waits: 2, RecheckHits: 2, SpinMisses: 7, SpinSkips: 8},
		DoorbellSleeps: 1, FutexSleeps: 2, FutexWakes: 3, WakeCostNs: 32_000, WakeSamples: 4, SlowWakes: 0.625,
		Fallbacks: []Reason{},
	}
	assert.Equal(t, want, a)
	a.Add(&Stats{WakeCostNs: 1_000_000, SlowWakes: 1}) // a process that measured none: no weight
	assert.Equal(t, want, a)
	b := want
	b.Add(&Stats{WakeCostNs: 32_000, WakeSamples: 4, SlowWakes: 1e308}) // an impostor's answer
	assert.InDelta(t, (0.625+1)/2, b.SlowWakes, 1e-9, "a share counts as at most 1")
	b.Add(&Stats{WakeCostNs: 32_000, WakeSamples: 8, SlowWakes: -5})
	assert.InDelta(t, (0.625+1)/4, b.SlowWakes, 1e-9, "and at least 0")

	a.Sub(&Stats{ReadWaits: Waits{Waits: 5, SpinHits: 9}, WriteWaits: Waits{SpinSkips: 1}, FutexWakes: 1, WakeCostNs: 1, WakeSamples: 4, SlowWakes: 1})
	assert.Equal(t, Stats{
		ReadWaits:      Waits{LongSpins: 1, FutexHits: 1, FutexMisses: 2, Deadlines: 5},
		WriteWaits:     Waits{Waits: 2, RecheckHits: 2, SpinMisses: 7, SpinSkips: 7},
		DoorbellSleeps: 1, FutexSleeps: 2, FutexWakes: 2, WakeCostNs: 32_000, SlowWakes: 0.625, Fallbacks: []Reason{},
	}, a)
}

// serve starts a server under testPID's name with handler h.
func serve(t *testing.T, h Handler) *Server {
	t.Helper()
	s, err := Listen(Name(testPID), h)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// raw connects to testPID's name without Dial's pid check.
func raw(t *testing.T) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: Name(testPID), Net: "unix"})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// ask sends one line on c and returns the response line, decoded. A refusal may come
// before the request is read, and the server closes: the write then fails (EPIPE), and
// the refusal is still there to read, as Ask does.
func ask(t *testing.T, c *net.UnixConn, line string) Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(time.Minute))
	_, werr := c.Write([]byte(line))
	b, err := bufio.NewReader(c).ReadBytes('\n')
	require.NoError(t, err, "reading the answer (the request's write: %v)", werr)
	var r Response
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

func TestServerAnswers(t *testing.T) {
	serve(t, func(req Request) Response {
		return Response{Conns: []Conn{{Side: req.Op}}}
	})
	r := ask(t, raw(t), `{"v":1,"op":"conns"}`+"\n")
	assert.Equal(t, Response{V: Version, Process: Self(), Conns: []Conn{{Side: "conns"}}}, r)

	r = ask(t, raw(t), `{"v":2,"op":"conns"}`+"\n")
	assert.Equal(t, ErrCodeBadRequest, r.Error)
	assert.Nil(t, r.Conns)
	r = ask(t, raw(t), `{"v":1,"op":"drop"}`+"\n")
	assert.Equal(t, ErrCodeBadRequest, r.Error)

	// A request past MaxRequest without a newline gets no answer: the server stops
	// reading and closes.
	c := raw(t)
	c.SetDeadline(time.Now().Add(time.Minute))
	_, err := c.Write([]byte(strings.Repeat("x", MaxRequest+1)))
	require.NoError(t, err)
	n, err := c.Read(make([]byte, 1))
	assert.Equal(t, 0, n)
	assert.Error(t, err)
}

// TestServerBusy: while MaxQueries are being answered, the next querier is refused at
// once, and served again once they are done.
func TestServerBusy(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	serve(t, func(req Request) Response {
		if req.Op == OpStats {
			entered <- struct{}{}
			<-release
		}
		return Response{Stats: &Stats{}}
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the server's Close, which waits for the handlers, if a check fails
	var wg sync.WaitGroup
	for range MaxQueries {
		c := raw(t)
		wg.Go(func() {
			r := ask(t, c, `{"v":1,"op":"stats"}`+"\n")
			assert.Empty(t, r.Error)
		})
		<-entered
	}
	r := ask(t, raw(t), `{"v":1,"op":"conns"}`+"\n")
	assert.Equal(t, ErrCodeBusy, r.Error)
	free()
	wg.Wait()
	r = ask(t, raw(t), `{"v":1,"op":"conns"}`+"\n")
	assert.Empty(t, r.Error)
}

// TestServerPanics: a handler fault ends that query, not the process, and frees its slot.
func TestServerPanics(t *testing.T) {
	serve(t, func(req Request) Response {
		if req.Op == OpReset {
			panic("handler fault")
		}
		return Response{}
	})
	for range MaxQueries + 1 {
		c := raw(t)
		c.SetDeadline(time.Now().Add(time.Minute))
		_, err := c.Write([]byte(`{"v":1,"op":"reset"}` + "\n"))
		require.NoError(t, err)
		n, err := c.Read(make([]byte, 1))
		assert.Equal(t, 0, n)
		assert.Error(t, err)
	}
	assert.Empty(t, ask(t, raw(t), `{"v":1,"op":"stats"}`+"\n").Error)
}

// TestDialChecksHolder: a name held by a process other than the one it names is
// refused (a squatter), and Query of our own endpoint works.
func TestDialChecksHolder(t *testing.T) {
	serve(t, func(Request) Response { return Response{} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, err := Dial(ctx, testPID)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is held by pid")

	s, err := Listen(Name(os.Getpid()), func(Request) Response { return Response{Stats: &Stats{ConnsNow: 7}} })
	if err != nil {
		t.Skipf("this process's own name is taken (by the smcloop package?): %v", err)
	}
	defer s.Close()
	r, err := Query(ctx, os.Getpid(), Request{Op: OpStats})
	require.NoError(t, err)
	assert.Equal(t, &Response{V: Version, Process: Self(), Stats: &Stats{ConnsNow: 7}}, r)
}

// TestModeString: SMC-D and SMC-R print their names alone, a fallback its carrier and
// both decline codes, as smcss does.
func TestModeString(t *testing.T) {
	assert.Equal(t, "SMCD", Conn{Mode: ModeSMCD}.ModeString())
	assert.Equal(t, "SMCR", Conn{Mode: ModeSMCR}.ModeString())
	assert.Equal(t, "TCP 0x05000000/0x03030001", Conn{Mode: ModeTCP, LocalReason: 0x05000000, PeerReason: 0x03030001}.ModeString())
}
