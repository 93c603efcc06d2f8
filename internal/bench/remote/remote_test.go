package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv makes the test binary a fake server child (see TestMain).
const childEnv = "REMOTE_TEST_CHILD"

// TestMain: with childEnv set, the test binary is a fake server child whose first
// argument says what it does: "echo" copies stdin to stdout, writes a line to stderr
// and exits 3; "hang" ignores stdin and never exits.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		switch os.Args[1] {
		case "echo":
			io.Copy(os.Stdout, os.Stdin)
			fmt.Fprintln(os.Stderr, "echo done")
			os.Exit(3)
		case "hang":
			fmt.Println("LISTEN hanging")
			select {}
		}
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// logLines is a Host.Log that signals every line it receives.
type logLines struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func newLog() *logLines { return &logLines{lines: make(chan string, 100)} }

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for line := range strings.Lines(string(p)) {
		select {
		case l.lines <- strings.TrimSpace(line):
		default:
		}
	}
	return len(p), nil
}

// waitFor waits (bounded) for a log line containing s.
func (l *logLines) waitFor(t *testing.T, s string) {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	for {
		select {
		case line := <-l.lines:
			if strings.Contains(line, s) {
				return
			}
		case <-timer.C:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("no log line with %q; the log:\n%s", s, l.buf.String())
		}
	}
}

// startHost serves a Host whose children are this binary as a fake child; only the
// first arguments "echo" and "hang" pass its Check.
func startHost(t *testing.T) (addr string, log *logLines) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return serveHost(t, ln)
}

// serveHost is startHost on ln.
func serveHost(t *testing.T, ln net.Listener) (addr string, log *logLines) {
	t.Helper()
	log = newLog()
	h := &Host{
		Command: func(args []string) *exec.Cmd {
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), childEnv+"=1")
			return cmd
		},
		Check: func(args []string) error {
			if len(args) != 1 || (args[0] != "echo" && args[0] != "hang") {
				return fmt.Errorf("unknown arguments %q", args)
			}
			return nil
		},
		Log:         log,
		MaxSessions: 2,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return ln.Addr().String(), log
}

func TestRelay(t *testing.T) {
	addr, log := startHost(t)
	var out, errOut bytes.Buffer
	status, err := Relay(context.Background(), addr, []string{"echo"}, strings.NewReader("LISTEN x\nhello\n"), &out, &errOut)
	require.NoError(t, err)
	assert.Equal(t, 3, status)
	assert.Equal(t, "LISTEN x\nhello\n", out.String())
	assert.Equal(t, "echo done\n", errOut.String())
	log.waitFor(t, `exited with status 3`)
}

// flakyListener fails its first Accept with EMFILE, as a process out of descriptors
// would.
type flakyListener struct {
	net.Listener
	failed atomic.Bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestHostAcceptRetries: a transient accept error (EMFILE) does not end the host; it
// retries and serves the next connection.
func TestHostAcceptRetries(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fl := &flakyListener{Listener: ln}
	addr, _ := serveHost(t, fl)
	var out bytes.Buffer
	status, err := Relay(context.Background(), addr, []string{"echo"}, strings.NewReader("after EMFILE\n"), &out, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 3, status)
	assert.Equal(t, "after EMFILE\n", out.String())
	assert.True(t, fl.failed.Load())
}

func TestRelayRefused(t *testing.T) {
	addr, log := startHost(t)
	_, err := Relay(context.Background(), addr, []string{"--transport", "nope"}, strings.NewReader(""), io.Discard, io.Discard)
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Contains(t, refused.Reason, "unknown arguments")
	log.waitFor(t, "refused")
}

// TestLifeline: a relay that goes away kills its child; a child that outlives its
// stdin by exitTimeout is killed.
func TestLifeline(t *testing.T) {
	defer func(d time.Duration) { exitTimeout = d }(exitTimeout)
	exitTimeout = 100 * time.Millisecond
	addr, log := startHost(t)

	c := helloConn(t, addr, []string{"hang"})
	typ, _ := readTestFrame(t, c)
	require.Equal(t, frameStarted, typ)
	typ, p := readTestFrame(t, c)
	require.Equal(t, frameStdout, typ)
	require.Equal(t, "LISTEN hanging\n", string(p))
	require.NoError(t, c.Close()) // the relay is gone
	log.waitFor(t, "exited with status 137")

	// The stdin ends, the child does not exit: killed, and the status is relayed.
	var out bytes.Buffer
	status, err := Relay(context.Background(), addr, []string{"hang"}, strings.NewReader(""), &out, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 137, status)
	assert.Equal(t, "LISTEN hanging\n", out.String())
}

// TestBadRelay: hellos that break the protocol are refused; a peer that sends nothing
// is dropped after helloTimeout.
func TestBadRelay(t *testing.T) {
	defer func(d time.Duration) { helloTimeout = d }(helloTimeout)
	helloTimeout = 200 * time.Millisecond
	addr, log := startHost(t)
	for _, tc := range []struct{ name, hello, want string }{
		{"magic", "GET / HTTP/1.1\n", "hello"},
		{"json", Magic + " {\"a\":1}\n", "a JSON array"},
		{"long", Magic + " [\"" + strings.Repeat("a", MaxHello) + "\"]\n", "without a newline"},
		{"args", Magic + " [" + strings.Repeat("\"a\",", maxArgs) + "\"a\"]\n", "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			go c.Write([]byte(tc.hello)) // the host may refuse before it has read it all
			typ, p := readTestFrame(t, c)
			assert.Equal(t, frameRefused, typ)
			assert.Contains(t, string(p), tc.want)
		})
	}
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the host hangs up on a silent peer")
	log.waitFor(t, "reading the hello")
}

// TestBadHost: the relay's checks of what a host sends.
func TestBadHost(t *testing.T) {
	defer func(d time.Duration) { helloTimeout = d }(helloTimeout)
	helloTimeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		reply []byte
		match func(error) bool
	}{
		{"silent", nil, func(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }},
		{"type", appendFrame(nil, 99, nil), func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"length", []byte{frameStdout, 0xff, 0xff, 0xff, 0xff}, func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"first", appendFrame(nil, frameStdout, []byte("x")), func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"exit length", appendFrame(appendFrame(nil, frameStarted, nil), frameExit, []byte{1}), func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"no exit", appendFrame(nil, frameStarted, nil), func(err error) bool { return errors.Is(err, ErrNoExit) }},
		{"short", append(appendFrame(nil, frameStarted, nil), frameStdout, 0, 0, 0, 9, 'x'), func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			served := make(chan struct{})
			go func() {
				defer close(served)
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				bufio.NewReader(c).ReadString('\n')
				c.Write(tc.reply)
				if tc.reply == nil {
					io.Copy(io.Discard, c) // silent until the relay gives up
				}
			}()
			_, err = Relay(context.Background(), ln.Addr().String(), []string{"echo"}, strings.NewReader(""), io.Discard, io.Discard)
			require.Error(t, err)
			assert.True(t, tc.match(err), "%v", err)
			<-served
		})
	}
}

// TestBusy: a connection over MaxSessions is refused.
func TestBusy(t *testing.T) {
	addr, _ := startHost(t)
	for range 2 {
		c := helloConn(t, addr, []string{"hang"})
		typ, _ := readTestFrame(t, c)
		require.Equal(t, frameStarted, typ)
		defer c.Close()
	}
	_, err := Relay(context.Background(), addr, []string{"echo"}, strings.NewReader(""), io.Discard, io.Discard)
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Contains(t, refused.Reason, "busy")
}

func helloConn(t *testing.T, addr string, args []string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	hello, err := appendHello(nil, args)
	require.NoError(t, err)
	_, err = c.Write(hello)
	require.NoError(t, err)
	return c
}

func readTestFrame(t *testing.T, c net.Conn) (byte, []byte) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
	typ, p, err := readFrame(c, make([]byte, MaxFrame))
	require.NoError(t, err)
	return typ, p
}

func TestHelloRoundTrip(t *testing.T) {
	args := []string{"--transport", "smcr", "--listen-ip", "10.0.0.1", "with space", "quote\"\n"}
	b, err := appendHello(nil, args)
	require.NoError(t, err)
	got, err := readHello(bufio.NewReaderSize(bytes.NewReader(b), MaxHello))
	require.NoError(t, err)
	assert.Equal(t, args, got)
	_, err = appendHello(nil, []string{strings.Repeat("a", MaxHello)})
	assert.Error(t, err)
	var st [4]byte
	binary.BigEndian.PutUint32(st[:], 7)
	typ, p, err := readFrame(bytes.NewReader(appendFrame(nil, frameExit, st[:])), make([]byte, MaxFrame))
	require.NoError(t, err)
	assert.Equal(t, frameExit, typ)
	assert.Equal(t, st[:], p)
}
