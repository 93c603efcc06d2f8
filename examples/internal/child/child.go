// Package child runs an example's server side as a second process: the example starts
// itself again with the server's flags, reads the address the child prints once it
// listens, and stops it by closing its standard input, so a child never outlives its
// parent.
package child

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Process is the server process of the one-command mode: this program started again with
// the server's flags. The child prints "ready ADDR" on its standard output once it
// listens (Ready) and exits when its standard input closes (WaitParent).
type Process struct {
	// Addr is where the child listens.
	Addr   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	copied chan struct{}
}

// Start runs this executable with args and waits for its ready line. The rest of the
// child's standard output is copied to ours; its standard error is ours.
func Start(args ...string) (*Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	c := &Process{cmd: cmd, stdin: stdin, copied: make(chan struct{})}
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if err != nil || !ok || addr == "" {
		stdin.Close()
		io.Copy(io.Discard, out)
		werr := cmd.Wait()
		if err == nil {
			err = fmt.Errorf("said %q", line)
		}
		return nil, fmt.Errorf("server process: no ready line (%w; exit: %v)", err, werr)
	}
	c.Addr = addr
	go func() {
		io.Copy(os.Stdout, out)
		close(c.copied)
	}()
	return c, nil
}

// Stop closes the child's standard input, which tells it to exit, and waits for it.
func (c *Process) Stop() error {
	c.stdin.Close()
	<-c.copied
	if err := c.cmd.Wait(); err != nil {
		return fmt.Errorf("server process: %w", err)
	}
	return nil
}

// Ready tells the parent, in the child, where the server listens.
func Ready(addr string) {
	fmt.Printf("ready %s\n", addr)
}

// WaitParent returns, in the child, when the parent closes our standard input.
func WaitParent() error {
	_, err := io.Copy(io.Discard, os.Stdin)
	return err
}

// Pid is the child's process id.
func (c *Process) Pid() int { return c.cmd.Process.Pid }
