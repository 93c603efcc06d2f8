package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// ServerCmd makes the command that runs a server child with the given arguments, which
// the child passes to ServeChild. The CLI re-executes itself with a hidden subcommand;
// tests run the test binary as a helper process. Run sets Stdin, Stdout and Stderr.
type ServerCmd func(args []string) *exec.Cmd

const (
	// childStartTimeout bounds the wait for the LISTEN line (a binary built with -race
	// starts slowly on a loaded machine).
	childStartTimeout = 20 * time.Second
	// childExitTimeout bounds the wait for a child to exit once its connection is closed;
	// after that it is killed.
	childExitTimeout = 5 * time.Second
	// stderrKeep is how much of a child's stderr is kept for error messages.
	stderrKeep = 2048
)

// child is a running server process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // the lifeline; closed by Wait, or by the kernel if we die
	out    *bufio.Reader
	stderr *tailBuffer
	addr   string
	// placed is the number of threads the child found on its CPU when it checked its
	// placement before exiting (its PLACED line; 0 if it printed none: not pinned).
	placed int
}

// startChild starts a server child and waits for its LISTEN line. On failure the child
// has been killed and reaped.
func startChild(ctx context.Context, mk ServerCmd, args []string) (*child, error) {
	cmd := mk(args)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), stderr: &tailBuffer{max: stderrKeep}}
	cmd.Stderr = c.stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the server process: %w", err)
	}

	r, err := c.readLine(ctx, childStartTimeout)
	if err != nil {
		return nil, fmt.Errorf("server process did not listen: %w", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSuffix(r.line, "\n"), "LISTEN ")
	if r.err != nil || !ok || addr == "" {
		c.kill()
		rest, _ := io.ReadAll(c.out)
		if fail := parseFail(r.line + string(rest)); fail != nil {
			c.reap()
			return nil, fail
		}
		return nil, fmt.Errorf("server process did not announce an address (got %q)%s", r.line, c.reap())
	}
	c.addr = addr
	return c, nil
}

// finish waits for the child to exit (its connection is closed by now), killing it after
// childExitTimeout or when ctx is done, and returns the failure it reported, if any.
func (c *child) finish(ctx context.Context) error {
	if c.cmd == nil {
		return nil // a server started on its own: its failures show at the client
	}
	_, err := c.finishWithin(ctx, childExitTimeout)
	return err
}

// finishWithin waits up to timeout for the child to exit, killing it after that or when
// ctx is done, and returns what it printed since the last line read and the failure it
// reported, if any.
func (c *child) finishWithin(ctx context.Context, timeout time.Duration) (string, error) {
	done := make(chan string, 1)
	go func() {
		rest, _ := io.ReadAll(c.out) // EOF when the child exits
		done <- string(rest)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var out string
	var late error
	select {
	case out = <-done:
	case <-timer.C:
		c.kill()
		out = <-done
		late = fmt.Errorf("server process did not exit within %v of the end of the run; killed", timeout)
	case <-ctx.Done():
		c.kill()
		out = <-done
		late = context.Cause(ctx)
	}
	detail := c.reap()
	c.placed = parsePlaced(out)
	if fail := parseFail(out); fail != nil {
		return out, fail
	}
	if late != nil {
		return out, late
	}
	if detail != "" {
		return out, errors.New("server process" + detail)
	}
	return out, nil
}

// childReplyTimeout bounds the wait for the answer to a command.
const childReplyTimeout = 10 * time.Second

// command sends cmd to a child serving with --conns and returns the rest of its answer
// line after "<reply> ". If the child does not answer, it is killed and reaped, and the
// error says why; the child must not be used after that.
func (c *child) command(ctx context.Context, cmd, reply string) (string, error) {
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		c.kill()
		return "", fmt.Errorf("sending %q to the server process: %w%s", cmd, err, c.reap())
	}
	r, err := c.readLine(ctx, childReplyTimeout)
	if err != nil {
		return "", fmt.Errorf("server process did not answer %q: %w", cmd, err)
	}
	rest, ok := strings.CutPrefix(strings.TrimSuffix(r.line, "\n"), reply+" ")
	if r.err != nil || !ok {
		c.kill()
		more, _ := io.ReadAll(c.out)
		if fail := parseFail(r.line + string(more)); fail != nil {
			c.reap()
			return "", fail
		}
		return "", fmt.Errorf("server process answered %q with %q%s", cmd, r.line, c.reap())
	}
	return rest, nil
}

// listenerStats asks a child serving with --conns for its listener's counters; nil if
// the transport has none. After an error the child has been killed and reaped.
func (c *child) listenerStats(ctx context.Context) (*ListenerStats, error) {
	js, err := c.command(ctx, "stats", "STATS")
	if err != nil {
		return nil, err
	}
	var st *ListenerStats
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		c.kill()
		return nil, fmt.Errorf("%w: server process counters %q: %v%s", ErrProtocol, js, err, c.reap())
	}
	return st, nil
}

// stopConns ends the service of a child serving with --conns and returns its report.
// The child is reaped in every case.
func (c *child) stopConns(ctx context.Context) (*ServerConnStats, error) {
	var st ServerConnStats
	if err := c.stop(ctx, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// stop ends the service of a child that takes commands (--conns, --http) and decodes
// its report into v. The child is reaped in every case.
func (c *child) stop(ctx context.Context, v any) error {
	if _, err := io.WriteString(c.stdin, "stop\n"); err != nil {
		c.kill()
		return fmt.Errorf("stopping the server process: %w%s", err, c.reap())
	}
	out, err := c.finishWithin(ctx, serverDrain+childExitTimeout)
	if err != nil {
		return err
	}
	for line := range strings.Lines(out) {
		if js, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "REPORT "); ok {
			if err := json.Unmarshal([]byte(js), v); err != nil {
				return fmt.Errorf("%w: server process report %q: %v", ErrProtocol, js, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: the server process exited without a report (printed %q)", ErrProtocol, out)
}

func (c *child) kill() { c.cmd.Process.Kill() }

// reap waits for the child and describes an unsuccessful exit as ": <status>: <stderr>",
// or returns "" for a clean exit.
func (c *child) reap() string {
	err := c.cmd.Wait()
	if err == nil {
		return ""
	}
	msg := ": " + err.Error()
	if tail := strings.TrimSpace(c.stderr.String()); tail != "" {
		msg += ": " + strings.ReplaceAll(tail, "\n", " | ")
	}
	return msg
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// abort kills the child and reaps it, for when the run ends without its report. It does
// nothing for a server started on its own (no process).
func (c *child) abort() {
	if c.cmd == nil {
		return
	}
	c.kill()
	c.reap()
}

// lineResult is one line read from the child's stdout.
type lineResult struct {
	line string
	err  error
}

// readLine reads the child's next stdout line. If none comes within timeout, or ctx ends,
// the child is killed and reaped and the error says so (ctx's cause, or the timeout and
// the child's exit). A read error is returned in the result, for the caller to interpret.
func (c *child) readLine(ctx context.Context, timeout time.Duration) (lineResult, error) {
	lines := make(chan lineResult, 1)
	go func() {
		line, err := c.out.ReadString('\n')
		lines <- lineResult{line, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-lines:
		return r, nil
	case <-timer.C:
		c.kill()
		<-lines
		return lineResult{}, fmt.Errorf("nothing within %v%s", timeout, c.reap())
	case <-ctx.Done():
		c.kill()
		<-lines
		c.reap()
		return lineResult{}, context.Cause(ctx)
	}
}
