package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// childProcesses lists the process ids of this process's children, from
// /proc/self/task/*/children.
func childProcesses(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("/proc/self/task/*/children")
	require.NoError(t, err)
	var kids []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if !os.IsNotExist(err) {
			require.NoError(t, err)
		}
		kids = append(kids, strings.Fields(string(b))...)
	}
	return kids
}
