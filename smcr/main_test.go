package smcr

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package's tests if a link group's goroutine outlives them: every
// group must end and join its goroutine.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if left := lingering(); left != "" {
			fmt.Fprintln(os.Stderr, "link group goroutines left after the tests:\n"+left)
			code = 1
		}
	}
	os.Exit(code)
}

// lingering returns the stacks of link group goroutines still running, giving those that
// are on their way out a moment.
func lingering() string {
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(5 * time.Second); ; {
		stacks := string(buf[:runtime.Stack(buf, true)])
		var left []string
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "smcr.(*LinkGroup).run(") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(end) {
			return strings.Join(left, "\n\n")
		}
		runtime.Gosched()
	}
}
