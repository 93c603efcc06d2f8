package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// childProcesses lists the process ids of this process's children, from
// /proc/self/task/*/children.
func childProcesses(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		kids = append(kids, strings.Fields(string(b))...)
	}
	return kids
}
