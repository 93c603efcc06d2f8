// Package child runs a server in a child process: the parent re-executes its own binary
// with the arguments that make it serve, and the two talk in lines over the child's
// standard input and output. The child announces its addresses with Ready, answers
// requests with Serve and exits when its standard input closes, so it never outlives
// its parent.
package child

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// Process is a running child.
type Process struct {
	// Ready holds the fields the child passed to Ready: its addresses.
	Ready []string

	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	mu   sync.Mutex // serialises Call
	once sync.Once
	err  error
}

// Start runs the current executable with args and env (nil: the parent's environment)
// and waits for the child's Ready line. The child's standard error is the parent's.
func Start(env []string, args ...string) (*Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, in: in, out: bufio.NewReader(out)}
	line, err := p.readLine()
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("child %s: no ready line: %w", strings.Join(args, " "), err)
	}
	fields := strings.Fields(line)
	if len(fields) == 0 || fields[0] != "ready" {
		p.Close()
		return nil, fmt.Errorf("child %s: said %q, want a ready line", strings.Join(args, " "), line)
	}
	p.Ready = fields[1:]
	return p, nil
}

func (p *Process) readLine() (string, error) {
	line, err := p.out.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// Call sends a one-line request and returns the child's one-line reply.
func (p *Process) Call(req string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.in, req+"\n"); err != nil {
		return "", err
	}
	return p.readLine()
}

// Close closes the child's standard input, which tells it to exit, and waits for it.
func (p *Process) Close() error {
	p.once.Do(func() {
		p.in.Close()
		p.err = p.cmd.Wait()
	})
	return p.err
}

// Ready tells the parent that the child serves, and where: it prints the ready line.
func Ready(fields ...string) {
	fmt.Println(strings.Join(append([]string{"ready"}, fields...), " "))
}

// Serve answers the parent's requests with handle until the parent closes the child's
// standard input; it returns nil then.
func Serve(handle func(req string) string) error {
	r := bufio.NewReader(os.Stdin)
	for {
		line, err := r.ReadString('\n')
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		reply := handle(strings.TrimSuffix(line, "\n"))
		if strings.Contains(reply, "\n") {
			return fmt.Errorf("child: reply to %q spans lines", line)
		}
		if _, err := fmt.Println(reply); err != nil {
			return err
		}
	}
}
