// Package asnobody starts the running test binary again as the unprivileged user
// nobody, for tests that play a hostile local user against a root process.
package asnobody

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// UID and GID of nobody on Debian-like systems (and of the overflow ids).
const (
	UID = 65534
	GID = 65534
)

var (
	copyOnce sync.Once
	copyPath string
	copyErr  error
)

// Command returns a command that runs the test binary as nobody with args. The test is
// skipped unless it runs as root. The binary is copied once to a directory nobody can
// read, since go test builds it in a private one.
func Command(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process as nobody")
	}
	copyOnce.Do(func() { copyPath, copyErr = publicCopy() })
	if copyErr != nil {
		t.Fatalf("copying the test binary for nobody: %v", copyErr)
	}
	cmd := exec.Command(copyPath, args...)
	runAsNobody(cmd)
	cmd.Dir = filepath.Dir(copyPath)
	return cmd
}

func publicCopy() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "smcloop-nobody-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst := filepath.Join(dir, filepath.Base(exe))
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return "", err
	}
	return dst, out.Close()
}

// Cleanup removes the copy; call it from TestMain after the tests ran.
func Cleanup() {
	if copyPath != "" {
		os.RemoveAll(filepath.Dir(copyPath))
	}
}
