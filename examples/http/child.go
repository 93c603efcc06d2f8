package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// child is the server process of the one-command mode: this program started again with
// the server's flags and -child. The child prints "ready ADDR" on its standard output once
// it listens and exits when its standard input closes, so it never outlives the parent.
type child struct {
	addr   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	copied chan struct{}
}

// startChild runs this executable with args and waits for its ready line. The rest of
// the child's standard output is copied to ours; its standard error is ours.
func startChild(args ...string) (*child, error) {
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
	c := &child{cmd: cmd, stdin: stdin, copied: make(chan struct{})}
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
	c.addr = addr
	go func() {
		io.Copy(os.Stdout, out)
		close(c.copied)
	}()
	return c, nil
}

// stop closes the child's standard input, which tells it to exit, and waits for it.
func (c *child) stop() error {
	c.stdin.Close()
	<-c.copied
	if err := c.cmd.Wait(); err != nil {
		return fmt.Errorf("server process: %w", err)
	}
	return nil
}

// ready tells the parent, in the child, where the server listens.
func ready(addr string) {
	fmt.Printf("ready %s\n", addr)
}

// waitParent returns, in the child, when the parent closes our standard input.
func waitParent() error {
	_, err := io.Copy(io.Discard, os.Stdin)
	return err
}
