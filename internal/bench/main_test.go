package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/smcloop/smcloop/internal/cpupin"
)

// helperEnv makes the test binary act as a bench server child (see TestMain).
const helperEnv = "SMCLOOP_BENCH_TEST_SERVER"

// TestMain runs the server half in a separate process, as the CLI does: when helperEnv is
// set, this test binary is a server child and runs ServeChild with its arguments.
func TestMain(m *testing.M) {
	registerTestTransports()
	if os.Getenv(helperEnv) == "1" {
		if err := ServeChild(context.Background(), os.Args[1:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Offsets in the client's streams at which the corrupting transports flip a bit. The
// client writes a header first and reads a ready message first, so payload starts at
// headerLen in the written stream and at readyLen in the read one.
const (
	flipMessage = 3
	flipByte    = 6
)

func registerTestTransports() {
	RegisterBuiltins()
	for _, f := range flips {
		Register(f.transport())
	}
	for _, t := range connTestTransports() {
		Register(t)
	}
	for _, t := range httpTestTransports() {
		Register(t)
	}
	Register(zcPlain.transport())
	Register(zcFlip.transport())
	Register(fallbackAfter)
	Register(straying)
}

// flip is TCP with one bit flipped in the byte at offset at of the stream the client
// writes (or reads). The server child registers these too; it only uses Listen, which is
// plain TCP.
type flip struct {
	name   string
	onRead bool
	at     int64
}

var (
	flipWritePP     = flip{"tcp-flip-write-pp", false, headerLen + flipMessage*14}                // byte 0 of a 14-byte message
	flipReadPP      = flip{"tcp-flip-read-pp", true, readyLen + flipMessage*14 + flipByte}        // an echo of 14 bytes
	flipWriteStream = flip{"tcp-flip-write-stream", false, headerLen + flipMessage*64 + flipByte} // a 64-byte message
	flips           = []flip{flipWritePP, flipReadPP, flipWriteStream}
)

func (f flip) transport() Transport {
	tcp := TCP()
	return Transport{
		Name:   f.name,
		Listen: tcp.Listen,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := tcp.Dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return &flipConn{Conn: c, onRead: f.onRead, at: f.at}, nil
		},
	}
}

// flipConn flips the lowest bit of the byte at offset at of the stream it writes (or
// reads), without touching the caller's buffer on writes.
type flipConn struct {
	net.Conn
	onRead bool
	at     int64
	n      int64
}

func (c *flipConn) Write(p []byte) (int, error) {
	if !c.onRead && c.at >= c.n && c.at < c.n+int64(len(p)) {
		p = bytes.Clone(p)
		p[c.at-c.n] ^= 0x01
	}
	n, err := c.Conn.Write(p)
	if !c.onRead {
		c.n += int64(n)
	}
	return n, err
}

func (c *flipConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.onRead {
		if c.at >= c.n && c.at < c.n+int64(n) {
			p[c.at-c.n] ^= 0x01
		}
		c.n += int64(n)
	}
	return n, err
}

// helperServer returns a ServerCmd that runs this test binary as a server child, with
// TMPDIR set to a fresh directory that the caller can check is left empty.
func helperServer(t *testing.T) (ServerCmd, string) {
	tmp := t.TempDir()
	return func(args []string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], args...)
		// A binary built with -race sleeps a second before exiting unless told not to.
		cmd.Env = append(os.Environ(), helperEnv+"=1", "TMPDIR="+tmp, "GORACE=atexit_sleep_ms=0")
		return cmd
	}, tmp
}

// straying is TCP whose listener leaves one thread of the server child on the client's
// CPU (clientCPU) for the rest of the child's life, as a library that pins a thread of
// its own would.
var straying = func() Transport {
	tcp := TCP()
	return Transport{
		Name: "tcp-straying-thread",
		Listen: func(ctx context.Context) (net.Listener, error) {
			pinned := make(chan error)
			go func() {
				runtime.LockOSThread()
				_, err := cpupin.Thread(clientCPU)
				pinned <- err
				select {} // the thread stays, locked and pinned, until the child exits
			}()
			if err := <-pinned; err != nil {
				return nil, err
			}
			return tcp.Listen(ctx)
		},
		Dial: tcp.Dial,
	}
}()
