package umltest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// DefaultTimeout is Run's hard timeout of one run when Config.Timeout is zero.
const DefaultTimeout = 5 * time.Minute

// A run of at least innerTimeoutMin gives the test binary inside -test.timeout
// innerTimeoutMargin below the run's timeout (variables for the package's tests).
var (
	innerTimeoutMin    = time.Minute
	innerTimeoutMargin = 20 * time.Second
)

// Config says how Run builds the test binary and runs it.
type Config struct {
	Instances  int           // 1 or 2; 0 means 2
	Tags       []string      // build tags of go test -c
	BuildFlags []string      // further go test -c flags, e.g. -race
	Args       []string      // further test flags, e.g. -test.count=1
	Env        []string      // VAR=VAL for the test binary in every instance
	Timeout    time.Duration // hard timeout of the run, rounded up to seconds; 0 means DefaultTimeout
	Memory     string        // memory of each instance, e.g. 1G; empty means run.sh's 512M
}

// Result is what one instance did.
type Result struct {
	Role    string // RoleServer or RoleClient
	Status  int    // the command's exit status; -1 when it never finished (timeout, instance died)
	Console []byte // the instance's console: kernel messages and the command's stdout and stderr
	Dir     string // the instance's kept directory (Env.Out inside), under t.TempDir()
}

// ErrNoKernel is Kernel's error when no UML kernel is built for the current configuration.
var ErrNoKernel = errors.New("umltest: no UML kernel built; run make uml-kernel (test/uml/build-kernel.sh, about 11 minutes once)")

// scripts returns test/uml, where run.sh and build-kernel.sh are, from this file's path.
func scripts() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("umltest: cannot locate the package's source")
	}
	dir := filepath.Dir(filepath.Dir(file))
	if _, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil {
		return "", fmt.Errorf("umltest: run.sh not beside the package's source (built with -trimpath?): %w", err)
	}
	return dir, nil
}

// Kernel returns the path of the cached UML kernel (build-kernel.sh --cached), or
// ErrNoKernel when none is built, or on a system other than Linux.
func Kernel() (string, error) {
	if runtime.GOOS != "linux" {
		return "", ErrNoKernel
	}
	dir, err := scripts()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(dir, "build-kernel.sh"), "--cached").Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return "", ErrNoKernel
	}
	if err != nil {
		return "", fmt.Errorf("umltest: build-kernel.sh --cached: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RunPattern is the -test.run pattern that selects exactly the test named name (t.Name(),
// subtests included).
func RunPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// Run builds the test binary of the package in the working directory (go test runs a test
// there), runs the calling test (t.Name()) in cfg.Instances UML instances through run.sh,
// logs every instance's console and fails t for each instance whose command did not exit 0.
// It skips t when no kernel is built and fails it when called inside an instance. The
// results are in instance order (the server first).
func Run(t testing.TB, cfg Config) []Result {
	t.Helper()
	if Enabled() {
		t.Fatal("umltest.Run inside a UML instance; call it only when Enabled() is false")
	}
	kernel, err := Kernel()
	if errors.Is(err, ErrNoKernel) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir, err := scripts()
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Instances
	if n == 0 {
		n = 2
	}
	if n != 1 && n != 2 {
		t.Fatalf("umltest: Config.Instances = %d, want 1 or 2", n)
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}

	work := t.TempDir()
	bin := filepath.Join(work, "pkg.test")
	build := []string{"test", "-c", "-o", bin}
	if len(cfg.Tags) > 0 {
		build = append(build, "-tags", strings.Join(cfg.Tags, ","))
	}
	build = append(append(build, cfg.BuildFlags...), ".")
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("umltest: the go command is needed to build the test binary: %v", err)
	}
	start := time.Now()
	if out, err := exec.Command(goTool, build...).CombinedOutput(); err != nil {
		t.Fatalf("umltest: go %s: %v\n%s", strings.Join(build, " "), err, out)
	}
	built := time.Since(start)

	// The test binary's own timeout, unless cfg.Args sets one (then a hang is not told
	// from a freeze).
	inner := timeout >= innerTimeoutMin && !slices.ContainsFunc(cfg.Args, func(a string) bool {
		return strings.HasPrefix(strings.TrimLeft(a, "-"), "test.timeout")
	})
	unlock, err := lockMachine()
	if err != nil {
		t.Fatalf("umltest: the machine-wide run lock: %v", err)
	}
	defer unlock()
	for attempt := 1; ; attempt++ {
		out := filepath.Join(work, "out"+strconv.Itoa(attempt))
		args := []string{"-q", "-k", kernel, "-n", strconv.Itoa(n), "-o", out,
			"-t", strconv.Itoa(int((timeout + time.Second - 1) / time.Second))}
		if cfg.Memory != "" {
			args = append(args, "-m", cfg.Memory)
		}
		for _, e := range cfg.Env {
			args = append(args, "-e", e)
		}
		args = append(args, "--", bin, "-test.run", RunPattern(t.Name()), "-test.v", "-test.count=1")
		if inner {
			// A test that hangs inside panics at its own timeout first, with every
			// goroutine's stack on the console, before the instance is killed.
			args = append(args, "-test.timeout", (timeout - innerTimeoutMargin).String())
		}
		args = append(args, cfg.Args...)
		var stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(dir, "run.sh"), args...)
		cmd.Stderr = &stderr
		// A descendant of the instances that keeps run.sh's stderr open must not hold the
		// test once run.sh has exited: stop waiting for the pipe a few seconds after it.
		cmd.WaitDelay = 5 * time.Second
		start = time.Now() // after the lock: the time the instances ran
		err = cmd.Run()
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
			t.Fatalf("umltest: run.sh: %v\n%s", err, stderr.Bytes())
		}
		t.Logf("umltest: built in %v, %d instance(s) ran in %v", built.Round(time.Millisecond), n, time.Since(start).Round(time.Millisecond))

		results := make([]Result, n)
		frozen := ""
		for i := range results {
			r := &results[i]
			r.Role = [...]string{RoleServer, RoleClient}[i]
			r.Dir = filepath.Join(out, strconv.Itoa(i+1))
			r.Status = -1
			if b, err := os.ReadFile(filepath.Join(r.Dir, "status")); err == nil {
				if s, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					r.Status = s
				}
			}
			r.Console, _ = os.ReadFile(filepath.Join(r.Dir, "console"))
			r.Console = bytes.ReplaceAll(r.Console, []byte("\r\n"), []byte("\n"))
			t.Logf("%s console:\n%s", r.Role, r.Console)
			if inner && Frozen(*r) {
				frozen = r.Role
			}
		}
		if frozen != "" && attempt == 1 {
			t.Logf("umltest: the %s instance froze: its command never finished and its own -test.timeout never fired, "+
				"so nothing ran in it, the test included (a UML or soft-RoCE fault, not the test's); running again, once", frozen)
			continue
		}
		for _, r := range results {
			if r.Status != 0 {
				t.Errorf("umltest: %s: exit status %d (-1: it never finished); run.sh said:\n%s", r.Role, r.Status, stderr.Bytes())
			}
		}
		return results
	}
}

// Frozen reports whether the instance of r, run with the test binary's own
// -test.timeout below the run's, was frozen: its command never finished (killed at the
// run's timeout) and the test binary's timeout panic never reached the console. A test
// that hangs, however it hangs, panics at its timeout; an instance whose kernel stopped
// running anything cannot.
func Frozen(r Result) bool {
	return r.Status == -1 && !bytes.Contains(r.Console, []byte("panic: test timed out"))
}
