package remote

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/smcloop/smcloop/internal/backoff"
)

// The host's bounds (variables so that the tests can shorten them).
var (
	// helloTimeout bounds the wait for a control connection's hello, and the relay's
	// wait for the host's answer.
	helloTimeout = 10 * time.Second
	// writeTimeout bounds every frame the host writes: a relay that stops reading for
	// that long is gone, and its child is killed.
	writeTimeout = 10 * time.Second
	// exitTimeout bounds the wait for a child to exit once its stdin has ended; after
	// that it is killed.
	exitTimeout = 10 * time.Second
)

// DefaultMaxSessions is Host.MaxSessions when it is zero.
const DefaultMaxSessions = 8

// Host serves control connections: each starts one server child and relays it.
type Host struct {
	// Command makes the command of a server child with the given arguments (this program,
	// re-executed as its server subcommand). Serve sets its Stdin, Stdout and Stderr.
	Command func(args []string) *exec.Cmd
	// Check checks the arguments a control connection sent before a child is started
	// with them; its error is sent back as the refusal.
	Check func(args []string) error
	// Log, if set, receives one line per session and the children's stderr, prefixed
	// with the session's peer.
	Log io.Writer
	// MaxSessions bounds the children running at once; a connection over it is refused.
	// Zero means DefaultMaxSessions.
	MaxSessions int

	logMu sync.Mutex
}

// Serve accepts control connections on ln until ctx ends or ln fails, serving each in
// its own goroutine; it closes ln, kills the children and waits for the sessions before
// it returns. After ctx ends it returns nil.
func (h *Host) Serve(ctx context.Context, ln net.Listener) error {
	if h.Command == nil || h.Check == nil {
		return errors.New("remote: Host needs Command and Check")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	limit := h.MaxSessions
	if limit <= 0 {
		limit = DefaultMaxSessions
	}
	slots := make(chan struct{}, limit)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var retry backoff.Backoff
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !errors.Is(err, net.ErrClosed) && retry.Wait(ctx.Done()) {
				continue // EMFILE and the like: a session that ends frees one
			}
			ln.Close()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("remote: accept: %w", err)
		}
		retry.Reset()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
				h.session(ctx, conn)
			default:
				h.logf(conn, "refused: %d sessions already", limit)
				h.refuse(conn, fmt.Sprintf("busy: %d sessions already", limit))
			}
		}()
	}
}

// logf writes one line to h.Log about the session with conn's peer.
func (h *Host) logf(conn net.Conn, format string, args ...any) {
	if h.Log == nil {
		return
	}
	h.logMu.Lock()
	defer h.logMu.Unlock()
	fmt.Fprintf(h.Log, "bench-host: %s: %s\n", conn.RemoteAddr(), fmt.Sprintf(format, args...))
}

// session serves one control connection: the hello, then the child's life.
func (h *Host) session(ctx context.Context, conn net.Conn) {
	br := bufio.NewReaderSize(conn, MaxHello)
	conn.SetReadDeadline(time.Now().Add(helloTimeout))
	args, err := readHello(br)
	if errors.Is(err, io.EOF) && br.Buffered() == 0 {
		h.logf(conn, "closed before a hello (a check that the bench host answers)")
		return
	}
	if err != nil {
		h.logf(conn, "no session: %v", err)
		if errors.Is(err, ErrProtocol) {
			h.refuse(conn, err.Error())
		}
		return
	}
	conn.SetReadDeadline(time.Time{})
	if err := h.Check(args); err != nil {
		h.logf(conn, "refused %q: %v", args, err)
		h.refuse(conn, err.Error())
		return
	}
	w := &frameWriter{conn: conn}
	status, err := h.run(ctx, conn, br, w, args)
	if err != nil {
		h.logf(conn, "server %q: %v", args, err)
		return
	}
	h.logf(conn, "server %q exited with status %d", args, status)
}

// refuse sends the refusal frame, bounded.
func (h *Host) refuse(conn net.Conn, reason string) {
	if len(reason) > MaxFrame {
		reason = reason[:MaxFrame]
	}
	conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	conn.Write(appendFrame(nil, frameRefused, []byte(reason)))
}

// run starts the child with args and relays it over conn until it exits; it returns
// its exit status. The child is killed when conn fails, when the relay stops reading,
// when it outlives its stdin by exitTimeout, or when ctx ends.
func (h *Host) run(ctx context.Context, conn net.Conn, br *bufio.Reader, w *frameWriter, args []string) (int, error) {
	cmd := h.Command(args)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, err
	}
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		h.refuse(conn, "starting the server: "+err.Error())
		return 0, fmt.Errorf("starting: %w", err)
	}
	kill := sync.OnceFunc(func() { cmd.Process.Kill() })
	w.onFail = kill
	stopCtx := context.AfterFunc(ctx, kill)
	defer stopCtx()
	w.frame(frameStarted, nil)

	// stdin: the relay's bytes until its half-close; then the child has exitTimeout to
	// exit. A failed read means the connection is gone: the child is killed.
	exited := make(chan struct{})
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		_, err := io.Copy(stdin, br)
		stdin.Close()
		if err != nil {
			kill()
			return
		}
		t := time.NewTimer(exitTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			kill()
		case <-exited:
		}
	}()
	var outs sync.WaitGroup
	pump := func(r io.Reader, typ byte, log bool) {
		defer outs.Done()
		sc := bufio.NewReaderSize(r, MaxFrame)
		buf := make([]byte, MaxFrame)
		for {
			n, err := sc.Read(buf)
			if n > 0 {
				w.frame(typ, buf[:n])
				if log {
					for line := range strings.Lines(string(buf[:n])) {
						h.logf(conn, "server: %s", strings.TrimRight(line, "\n"))
					}
				}
			}
			if err != nil {
				return
			}
		}
	}
	outs.Add(2)
	go pump(stdout, frameStdout, false)
	go pump(stderr, frameStderr, true)
	outs.Wait()
	werr := cmd.Wait()
	close(exited)
	status := cmd.ProcessState.ExitCode()
	if status < 0 {
		status = 128 + 9 // killed by a signal, as a shell reports SIGKILL
	}
	var st [4]byte
	binary.BigEndian.PutUint32(st[:], uint32(int32(status)))
	w.frame(frameExit, st[:])
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	conn.Close() // ends the stdin copy
	<-inDone
	var exit *exec.ExitError
	if werr != nil && !errors.As(werr, &exit) {
		return status, werr
	}
	if w.err != nil {
		return status, fmt.Errorf("relaying to the client: %w", w.err)
	}
	return status, nil
}

// frameWriter writes frames to a control connection, each within writeTimeout; after
// the first failure it writes nothing more and calls onFail.
type frameWriter struct {
	mu     sync.Mutex
	conn   net.Conn
	buf    []byte
	err    error
	onFail func()
}

func (w *frameWriter) frame(typ byte, p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	w.buf = appendFrame(w.buf[:0], typ, p)
	w.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := w.conn.Write(w.buf); err != nil {
		w.err = err
		if w.onFail != nil {
			w.onFail()
		}
	}
}
