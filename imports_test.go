package smcloop

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCoreImportsNoBackend: the connection core is backend-neutral. Of the root
// package's files (every OS's, tests aside) only the SMC-D handshake may import the
// SMC-D backend and its device, and the configuration the device alone (Config.Device).
// A second backend's handshake file gets its own entry here, nothing else.
func TestCoreImportsNoBackend(t *testing.T) {
	const module = "github.com/smcloop/smcloop/"
	allowed := map[string][]string{
		"handshake_smcd.go": {module + "smcd", module + "ism"},
		"handshake_smcr.go": {module + "smcr", module + "internal/verbs"},
		"config.go":         {module + "ism"},
	}
	backends := []string{module + "smcd", module + "ism", module + "smcr", module + "internal/verbs"}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var offending []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			if slices.Contains(backends, path) && !slices.Contains(allowed[name], path) {
				offending = append(offending, name+" imports "+path)
			}
		}
	}
	assert.Empty(t, offending, "core files that import a backend")
}
