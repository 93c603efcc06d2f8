package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/shmipc-go"
	"github.com/smcloop/smcloop/internal/bench"
)

// shmipc-go's default buffer slices are 8 KiB, 32 KiB and 128 KiB, each less a 20-byte
// header. A reservation larger than the largest slice is not served from shared memory
// (shmipc-go then moves the whole stream onto the unix socket), so the zero-copy writer
// reserves at most one largest slice at a time, and the reader leases as much.
const (
	shmipcSliceHeader = 20
	shmipcMaxSlice    = 128<<10 - shmipcSliceHeader
)

// errShmipcFallback fails a measurement whose stream shmipc-go moved to the unix socket.
var errShmipcFallback = fmt.Errorf("%w: shmipc-go moved the stream from shared memory to its unix socket (no free buffer)", bench.ErrFallback)

// registerShmipc adds shmipc-go's Stream, read and written through its net.Conn methods
// (copying), and through its zero-copy buffers, each with the flow control a program
// that streams over shmipc-go must add (window.go).
func registerShmipc() {
	base := bench.Transport{
		Listen:   listenShmipc,
		ListenOn: listenShmipcOn,
		Dial:     dialShmipc,
		Mode:     shmipcMode,
	}
	copying := base
	copying.Name = "shmipc"
	copying.Desc = "shmipc-go v0.2.0 Stream over a unix socket session (memfd, default config), Read and Write; a credit window of 8 MiB and 1024 writes on a second stream (window.go)"
	bench.Register(copying)

	zc := base
	zc.Name = "shmipc-zc"
	zc.Desc = "shmipc-go v0.2.0 Stream, zero-copy: BufferWriter.Reserve and Flush, BufferReader.ReadBytes and ReleasePreviousRead; the credit window, also bounding the slices held to 3 MiB"
	zc.ZeroCopy = &bench.ZeroCopy{Open: openShmipcZeroCopy}
	bench.Register(zc)
}

// shmipcConfig is shmipc-go's default configuration with memfd shared memory (passed
// over the unix socket, so nothing is left in /dev/shm) and its log on log, warnings
// included (shmipc-go's default level).
func shmipcConfig(log io.Writer) *shmipc.Config {
	c := shmipc.DefaultConfig()
	c.MemMapType = shmipc.MemMapTypeMemFd
	c.ShareMemoryPathPrefix = fmt.Sprintf("/dev/shm/smcloop-bench-shmipc-%d", os.Getpid())
	c.QueuePath = c.ShareMemoryPathPrefix + "_queue"
	c.LogOutput = log
	return c
}

// fallbackLog passes a session's log to stderr and notes when its stream left shared
// memory for the unix socket (the warning "stream fallback"), which shmipc-go does when
// it cannot allocate a buffer, and never undoes. shmipc-go tells it nowhere else.
type fallbackLog struct {
	fellBack atomic.Bool
}

func (l *fallbackLog) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "fallback") {
		l.fellBack.Store(true)
	}
	return os.Stderr.Write(p)
}

var _ net.Conn = (*shmipcConn)(nil)

// shmipcConn is one shmipc-go stream of a session as a net.Conn, with the flow control
// a program streaming over shmipc-go must add (window, on the session's other stream).
type shmipcConn struct {
	*shmipc.Stream
	win    *window
	log    *fallbackLog
	linger bool // the server's: wait for the client to close first
	once   sync.Once
	close  func() error // ends the session
}

// shmipcLinger bounds how long a server's Close waits for its client to close first.
const shmipcLinger = 5 * time.Second

// Close closes the stream and its session. A server's first waits, up to shmipcLinger,
// for the client to close its end of the stream (a read then fails): a session closed
// with data still queued to the client resets the unix socket, and the client's session
// drops that data (the benchmark's report).
// Write writes through shmipc-go's Stream (copying into shared memory and flushing) once
// the window lets it, and fails once the stream has left shared memory.
func (c *shmipcConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := c.win.acquire(len(p), copyLimits, nil); err != nil {
		return 0, err
	}
	n, err := c.Stream.Write(p)
	c.win.wrote(n)
	if err == nil && c.log.fellBack.Load() {
		err = errShmipcFallback
	}
	return n, err
}

// Read reads through shmipc-go's Stream (copying out of shared memory) and tells the
// window.
func (c *shmipcConn) Read(p []byte) (int, error) {
	n, err := c.Stream.Read(p)
	if werr := c.win.consumed(n); err == nil {
		err = werr
	}
	return n, err
}

// SetDeadline sets the stream's deadlines and the window's.
func (c *shmipcConn) SetDeadline(t time.Time) error {
	c.win.setWriteDeadline(t)
	return c.Stream.SetDeadline(t)
}

// SetWriteDeadline sets the stream's write deadline and the window's.
func (c *shmipcConn) SetWriteDeadline(t time.Time) error {
	c.win.setWriteDeadline(t)
	return c.Stream.SetWriteDeadline(t)
}

func (c *shmipcConn) Close() error {
	var err error
	c.once.Do(func() {
		if c.linger {
			var b [1]byte
			if c.Stream.SetReadDeadline(time.Now().Add(shmipcLinger)) == nil {
				c.Stream.Read(b[:])
			}
		}
		c.win.close()
		err = errors.Join(c.Stream.Close(), c.close())
		// Closing the session closes the credit stream too, which ends the window's reader.
		select {
		case <-c.win.stopped:
		case <-time.After(shmipcLinger):
			err = errors.Join(err, errors.New("shmipc window: the credit stream's reader did not end"))
		}
	})
	return err
}

// shmipcMode reports a connection as shared memory unless shmipc-go fell back to the
// unix socket.
func shmipcMode(conn net.Conn) (bool, string) {
	c, ok := conn.(*shmipcConn)
	if !ok {
		return false, fmt.Sprintf("not a shmipc-go connection (%T)", conn)
	}
	if c.log.fellBack.Load() {
		return false, errShmipcFallback.Error()
	}
	return true, "shmipc-go shared memory"
}

// shmipcListener accepts unix socket connections and makes each the server side of a
// shmipc-go session, whose first stream it returns. Closing it closes the unix listener
// (which removes a temporary socket directory).
type shmipcListener struct {
	net.Listener
}

func listenShmipc(ctx context.Context) (net.Listener, error) {
	ln, err := bench.ListenTempUnix(ctx, "smcloop-bench-shmipc-")
	if err != nil {
		return nil, err
	}
	return &shmipcListener{Listener: ln}, nil
}

// listenShmipcOn listens on the unix socket path addr.
func listenShmipcOn(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", addr)
	if err != nil {
		return nil, err
	}
	return &shmipcListener{Listener: ln}, nil
}

func (l *shmipcListener) Accept() (net.Conn, error) {
	raw, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	log := &fallbackLog{}
	sess, err := shmipc.Server(raw, shmipcConfig(log))
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("shmipc-go server session: %w", err)
	}
	// The client's credit stream first (it writes a byte on it at once), then the data
	// stream, which the server learns of with the client's first message.
	ctl, err := sess.AcceptStream()
	if err == nil {
		err = acceptCredit(ctl, shmipcLinger)
	}
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("shmipc-go accepting the credit stream: %w", err)
	}
	st, err := sess.AcceptStream()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("shmipc-go accepting the stream: %w", err)
	}
	return &shmipcConn{Stream: st, win: newWindow(ctl), log: log, linger: true, close: sess.Close}, nil
}

// dialShmipc opens a client session to the unix socket addr with its credit stream and
// its data stream, through a shmipc-go session manager of one session (the only client
// constructor it exports).
func dialShmipc(ctx context.Context, addr string) (net.Conn, error) {
	log := &fallbackLog{}
	cfg := shmipc.DefaultSessionManagerConfig()
	cfg.Config = shmipcConfig(log)
	cfg.Network, cfg.Address = "unix", addr
	cfg.SessionNum = 1
	type result struct {
		sm      *shmipc.SessionManager
		ctl, st *shmipc.Stream
		err     error
	}
	done := make(chan result, 1)
	go func() {
		sm, err := shmipc.NewSessionManager(cfg)
		if err != nil {
			done <- result{err: err}
			return
		}
		ctl, err := sm.GetStream()
		if err == nil {
			err = openCredit(ctl)
		}
		var st *shmipc.Stream
		if err == nil {
			st, err = sm.GetStream()
		}
		if err != nil {
			sm.Close()
		}
		done <- result{sm, ctl, st, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("shmipc-go client session: %w", r.err)
		}
		return &shmipcConn{Stream: r.st, win: newWindow(r.ctl), log: log, close: r.sm.Close}, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				r.sm.Close()
			}
		}()
		return nil, context.Cause(ctx)
	}
}

// openShmipcZeroCopy returns a connection's zero-copy writer and reader.
func openShmipcZeroCopy(conn net.Conn) (bench.ZeroCopyWriter, bench.ZeroCopyReader, error) {
	c, ok := conn.(*shmipcConn)
	if !ok {
		return nil, nil, fmt.Errorf("not a shmipc-go connection (%T)", conn)
	}
	return &shmipcWriter{c: c, w: c.BufferWriter()}, &shmipcReader{c: c, r: c.BufferReader()}, nil
}

// shmipcWriter reserves in the stream's send buffer and flushes it to the peer once the
// window lets it.
type shmipcWriter struct {
	c        *shmipcConn
	w        shmipc.BufferWriter
	reserved int // since the last Publish
}

// Reserve takes one buffer slice's worth once the window lets it; if it must wait, it
// publishes what it reserved before, for the reader to read.
func (w *shmipcWriter) Reserve(n int) ([]byte, error) {
	n = min(n, shmipcMaxSlice)
	if err := w.c.win.acquire(n, zcLimits, w.flush); err != nil {
		return nil, err
	}
	b, err := w.w.Reserve(n)
	if err != nil {
		return nil, err
	}
	w.c.win.wrote(len(b))
	w.reserved += len(b)
	return b, nil
}

func (w *shmipcWriter) Publish() error { return w.flush() }

// flush flushes what was reserved since the last flush to the reader.
func (w *shmipcWriter) flush() error {
	if w.reserved == 0 {
		return nil
	}
	w.reserved = 0
	if err := w.c.Flush(false); err != nil {
		return err
	}
	if w.c.log.fellBack.Load() {
		return errShmipcFallback
	}
	return nil
}

// shmipcReader reads the stream's receive buffer in place: ReadBytes returns the bytes
// where they lie when they are in one buffer slice. A release tells the window.
type shmipcReader struct {
	c      *shmipcConn
	r      shmipc.BufferReader
	leased int // since the last Release
}

func (r *shmipcReader) Lease(n int) ([]byte, error) {
	b, err := r.r.ReadBytes(min(n, shmipcMaxSlice))
	if errors.Is(err, shmipc.ErrEndOfStream) {
		return nil, io.EOF
	}
	r.leased += len(b)
	return b, err
}

func (r *shmipcReader) Release() error {
	r.r.ReleasePreviousRead()
	n := r.leased
	r.leased = 0
	return r.c.win.consumed(n)
}
