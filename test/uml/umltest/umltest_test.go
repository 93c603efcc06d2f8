package umltest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// roundTripPort is the TCP port TestTwoInstances uses between the instances.
const roundTripPort = 7001

// TestTwoInstances runs itself in two instances: the client sends a line over TCP from
// 10.0.0.2 to 10.0.0.1, the server answers, each checks that rxe0 exists, prints what it
// got and writes it to its kept directory; the host checks both exit statuses, outputs and
// files.
func TestTwoInstances(t *testing.T) {
	if Enabled() {
		roundTripInside(t)
		return
	}
	res := Run(t, Config{Instances: 2, Timeout: 2 * time.Minute})
	require.Len(t, res, 2)
	want := []struct{ role, line, file string }{
		{RoleServer, `umltest-roundtrip: server 10.0.0.1 got "ping from 10.0.0.2"`, "ping from 10.0.0.2\n"},
		{RoleClient, `umltest-roundtrip: client 10.0.0.2 got "pong from 10.0.0.1"`, "pong from 10.0.0.1\n"},
	}
	for i, w := range want {
		r := res[i]
		assert.Equal(t, w.role, r.Role)
		assert.Equal(t, 0, r.Status, "%s exit status", r.Role)
		assert.Contains(t, lines(r.Console), w.line, "%s console", r.Role)
		assert.True(t, hasLinePrefix(r.Console, "--- PASS: TestTwoInstances ("), "%s console has no PASS line", r.Role)
		got, err := os.ReadFile(filepath.Join(r.Dir, "got"))
		if assert.NoError(t, err, "%s kept file", r.Role) {
			assert.Equal(t, w.file, string(got))
		}
	}
}

func lines(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

func hasLinePrefix(b []byte, prefix string) bool {
	for _, l := range lines(b) {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func roundTripInside(t *testing.T) {
	env, err := Current()
	require.NoError(t, err)
	require.Equal(t, 2, env.Instances)
	_, err = os.Stat("/sys/class/infiniband/rxe0")
	require.NoError(t, err, "rxe0 is missing in the instance")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var c net.Conn
	switch env.Role {
	case RoleServer:
		ln, err := net.Listen("tcp", net.JoinHostPort(env.Addr, fmt.Sprint(roundTripPort)))
		require.NoError(t, err)
		defer ln.Close()
		c, err = ln.Accept()
		require.NoError(t, err)
	case RoleClient:
		c, err = env.DialPeer(ctx, roundTripPort)
		require.NoError(t, err)
	}
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(time.Minute)))
	r := bufio.NewReader(c)
	var got string
	if env.Role == RoleClient {
		_, err = fmt.Fprintf(c, "ping from %s\n", env.Addr)
		require.NoError(t, err)
		got, err = r.ReadString('\n')
		require.NoError(t, err)
	} else {
		got, err = r.ReadString('\n')
		require.NoError(t, err)
		_, err = fmt.Fprintf(c, "pong from %s\n", env.Addr)
		require.NoError(t, err)
	}
	fmt.Printf("umltest-roundtrip: %s %s got %q\n", env.Role, env.Addr, strings.TrimSuffix(got, "\n"))
	require.NoError(t, os.WriteFile(filepath.Join(env.Out, "got"), []byte(got), 0o644))
}

// recorder is a testing.TB whose Errorf is recorded instead of failing, and whose Name is
// the test Run re-runs inside the instances.
type recorder struct {
	testing.TB
	name   string
	errors []string
	logs   []string
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
	r.TB.Logf(format, args...)
}

// TestInsideExit is the test TestExitStatus runs inside two instances: the server passes,
// the client fails.
func TestInsideExit(t *testing.T) {
	if !Enabled() {
		t.Skip("runs inside UML instances, for TestExitStatus")
	}
	env, err := Current()
	require.NoError(t, err)
	if env.Role == RoleClient {
		t.Fatal("umltest: the client fails on purpose")
	}
}

// TestExitStatus checks that one instance's failing command is reported as that instance's
// exit status and fails the test once, naming the instance.
func TestExitStatus(t *testing.T) {
	if Enabled() {
		t.Skip("runs on the host")
	}
	rec := &recorder{TB: t, name: "TestInsideExit"}
	res := Run(rec, Config{Instances: 2, Timeout: 2 * time.Minute})
	require.Len(t, res, 2)
	assert.Equal(t, 0, res[0].Status)
	assert.Equal(t, 1, res[1].Status)
	assert.Contains(t, string(res[1].Console), "umltest: the client fails on purpose")
	assert.NotContains(t, string(res[0].Console), "umltest: the client fails on purpose")
	require.Len(t, rec.errors, 1)
	assert.True(t, strings.HasPrefix(rec.errors[0], "umltest: client: exit status 1 "), rec.errors[0])
}

// TestInsideHang is the test TestTimeout runs inside one instance: it never returns.
func TestInsideHang(t *testing.T) {
	if !Enabled() {
		t.Skip("runs inside a UML instance, for TestTimeout")
	}
	select {}
}

// TestTimeout checks that a command that never finishes is killed at the run's timeout and
// reported as never finished.
func TestTimeout(t *testing.T) {
	if Enabled() {
		t.Skip("runs on the host")
	}
	rec := &recorder{TB: t, name: "TestInsideHang"}
	res := Run(rec, Config{Instances: 1, Timeout: 5 * time.Second})
	require.Len(t, res, 1)
	assert.Equal(t, RoleServer, res[0].Role)
	assert.Equal(t, -1, res[0].Status)
	require.Len(t, rec.errors, 1)
	assert.Contains(t, rec.errors[0], "run.sh: server: timed out after 5 s, instance killed")
}

// shortInnerTimeout lowers the run length from which Run gives the test binary its own
// timeout, and that timeout's margin, for the rest of t.
func shortInnerTimeout(t *testing.T, from, margin time.Duration) {
	oldMin, oldMargin := innerTimeoutMin, innerTimeoutMargin
	innerTimeoutMin, innerTimeoutMargin = from, margin
	t.Cleanup(func() { innerTimeoutMin, innerTimeoutMargin = oldMin, oldMargin })
}

// TestHangPanicsInside checks the premise of Frozen: a test that hangs inside an
// instance, run with its own -test.timeout below the run's, panics at it with its
// goroutines' stacks on the console, so its instance is not taken for frozen and the run is
// not repeated.
func TestHangPanicsInside(t *testing.T) {
	if Enabled() {
		t.Skip("runs on the host")
	}
	shortInnerTimeout(t, 10*time.Second, 6*time.Second)
	rec := &recorder{TB: t, name: "TestInsideHang"}
	res := Run(rec, Config{Instances: 1, Timeout: 12 * time.Second})
	require.Len(t, res, 1)
	assert.NotEqual(t, 0, res[0].Status)
	assert.NotEqual(t, -1, res[0].Status, "the test's own timeout ended it, not the run's")
	assert.Contains(t, string(res[0].Console), "panic: test timed out after 6s")
	assert.Contains(t, string(res[0].Console), "goroutine ")
	assert.False(t, Frozen(res[0]))
	require.Len(t, rec.errors, 1)
	assert.Contains(t, rec.errors[0], "umltest: server: exit status")
}

// TestInsideFreeze is the test TestFrozenRunsAgain runs inside one instance: it stops
// its own process, as a frozen instance would, so that not even its timeout can fire.
func TestInsideFreeze(t *testing.T) {
	if !Enabled() {
		t.Skip("runs inside a UML instance, for TestFrozenRunsAgain")
	}
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGSTOP))
}

// TestFrozenRunsAgain: a run whose instance froze is run once more, saying so, and fails
// if it freezes again.
func TestFrozenRunsAgain(t *testing.T) {
	if Enabled() {
		t.Skip("runs on the host")
	}
	shortInnerTimeout(t, 8*time.Second, 4*time.Second)
	rec := &recorder{TB: t, name: "TestInsideFreeze"}
	res := Run(rec, Config{Instances: 1, Timeout: 8 * time.Second})
	require.Len(t, res, 1)
	assert.Equal(t, -1, res[0].Status)
	assert.True(t, Frozen(res[0]))
	again := 0
	for _, l := range rec.logs {
		if strings.Contains(l, "the server instance froze") && strings.Contains(l, "running again, once") {
			again++
		}
	}
	assert.Equal(t, 1, again, "one more run, said once: %q", rec.logs)
	require.Len(t, rec.errors, 1, "the second freeze fails the test")
	assert.Contains(t, rec.errors[0], "umltest: server: exit status -1")
}

// TestFrozen: an instance killed at the run's timeout with no timeout panic of its test
// on the console was frozen; one that finished, or panicked at its own timeout, was not.
func TestFrozen(t *testing.T) {
	assert.True(t, Frozen(Result{Status: -1, Console: []byte("=== RUN   TestX\n")}))
	assert.False(t, Frozen(Result{Status: -1, Console: []byte("panic: test timed out after 4m20s\n")}))
	assert.False(t, Frozen(Result{Status: 1, Console: []byte("--- FAIL: TestX\n")}))
	assert.False(t, Frozen(Result{Status: 0}))
}

func TestCurrentOutside(t *testing.T) {
	if Enabled() {
		t.Skip("runs on the host")
	}
	_, err := Current()
	assert.ErrorIs(t, err, ErrNotInUML)
}

func TestRunPattern(t *testing.T) {
	assert.Equal(t, "^TestA$", RunPattern("TestA"))
	assert.Equal(t, `^TestA$/^sub\.1$/^x\+y$`, RunPattern("TestA/sub.1/x+y"))
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseEnv(t *testing.T) {
	good := map[string]string{
		envRole: RoleClient, envIndex: "2", envInstances: "2",
		envAddr: "10.0.0.2", envPeer: "10.0.0.1", envOut: "/out/2",
	}
	e, err := parseEnv(envOf(good))
	require.NoError(t, err)
	assert.Equal(t, Env{Role: RoleClient, Index: 2, Instances: 2, Addr: "10.0.0.2", Peer: "10.0.0.1", Out: "/out/2"}, e)

	one := map[string]string{envRole: RoleServer, envIndex: "1", envInstances: "1", envAddr: "10.0.0.1", envOut: "/out/1"}
	e, err = parseEnv(envOf(one))
	require.NoError(t, err)
	assert.Equal(t, Env{Role: RoleServer, Index: 1, Instances: 1, Addr: "10.0.0.1", Out: "/out/1"}, e)

	bad := []struct {
		key, val, err string
	}{
		{envIndex, "3", `umltest: UMLTEST_INDEX="3", want 1 or 2`},
		{envIndex, "", `umltest: UMLTEST_INDEX="", want 1 or 2`},
		{envInstances, "1", `umltest: UMLTEST_INSTANCES="1" with UMLTEST_INDEX=2, want 1 or 2, at least the index`},
		{envRole, RoleServer, `umltest: UMLTEST_ROLE="server" for instance 2, want "client"`},
		{envAddr, "fe80::1", `umltest: UMLTEST_ADDR="fe80::1", want an IPv4 address`},
		{envPeer, "10.0.0.2", `umltest: UMLTEST_PEER="10.0.0.2", want the other instance's IPv4 address`},
		{envPeer, "", `umltest: UMLTEST_PEER="", want the other instance's IPv4 address`},
		{envOut, "", `umltest: UMLTEST_OUT is empty, want the instance's directory`},
	}
	for _, b := range bad {
		m := map[string]string{}
		for k, v := range good {
			m[k] = v
		}
		m[b.key] = b.val
		_, err := parseEnv(envOf(m))
		assert.EqualError(t, err, b.err, "%s=%q", b.key, b.val)
	}
	one[envPeer] = "10.0.0.2"
	_, err = parseEnv(envOf(one))
	assert.EqualError(t, err, `umltest: UMLTEST_PEER="10.0.0.2" with one instance, want it empty`)
}

func FuzzParseEnv(f *testing.F) {
	f.Add(RoleClient, "2", "2", "10.0.0.2", "10.0.0.1", "/out")
	f.Add(RoleServer, "1", "1", "10.0.0.1", "", "/out")
	f.Fuzz(func(t *testing.T, role, index, instances, addr, peer, out string) {
		e, err := parseEnv(envOf(map[string]string{
			envRole: role, envIndex: index, envInstances: instances,
			envAddr: addr, envPeer: peer, envOut: out,
		}))
		if err != nil {
			return
		}
		assert.Contains(t, []int{1, 2}, e.Index)
		assert.LessOrEqual(t, e.Index, e.Instances)
		assert.Equal(t, [...]string{RoleServer, RoleClient}[e.Index-1], e.Role)
		assert.Equal(t, e.Instances == 2, e.Peer != "")
		assert.NotEmpty(t, e.Out)
	})
}
