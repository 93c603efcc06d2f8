package bench

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// headerEnds matches a table's title line that ends in the columns cols, in that order.
// Columns are right-aligned and as wide as their widest cell, so the spaces between two
// titles depend on the figures measured: a slow machine's 1,232.43 µs of CPU per request
// widens "cpu/req" by one. Two spaces or more separate every pair of titles.
func headerEnds(cols ...string) *regexp.Regexp {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = regexp.QuoteMeta(c)
	}
	return regexp.MustCompile(`(?m) {2,}` + strings.Join(quoted, ` {2,}`) + `$`)
}

// assertHeaderEnds asserts that out has a title line ending in the columns cols.
func assertHeaderEnds(t *testing.T, out string, cols ...string) {
	t.Helper()
	assert.Regexp(t, headerEnds(cols...), out, "a title line ending in %q", cols)
}

// TestHeaderEndsWideCells: a column whose cells are wider than its title moves the
// title right; the header still matches, and titles out of order do not.
func TestHeaderEndsWideCells(t *testing.T) {
	for _, cpu := range []string{"867.41", "1,232.43", "12,345.67"} {
		tb := newTable("-server", "pushes", "cpu/req", "cores", "cpu vs tcp:sendfile")
		tb.add("tcp:sendfile", "-", cpu, "1.25", "1.00x")
		var buf bytes.Buffer
		tb.write(&buf, "  ")
		out := buf.String()
		header, _, ok := strings.Cut(out, "\n")
		require.True(t, ok, out)
		assert.Regexp(t, headerEnds("pushes", "cpu/req", "cores", "cpu vs tcp:sendfile"), out, "cpu/req %s", cpu)
		assert.NotRegexp(t, headerEnds("cpu/req", "pushes", "cores", "cpu vs tcp:sendfile"), out, "cpu/req %s", cpu)
		assert.NotRegexp(t, headerEnds("req", "cores", "cpu vs tcp:sendfile"), out, "a part of a title")
		if len(cpu) > len("cpu/req") {
			assert.NotContains(t, header, "  pushes  cpu/req  cores", "a fixed spacing holds only for narrow cells")
		}
		// The title's right edge is the cells' right edge.
		row := strings.Split(out, "\n")[1]
		assert.Equal(t, strings.Index(header, "cpu/req")+len("cpu/req"), strings.Index(row, cpu)+len(cpu), "%q\n%q", header, row)
	}
}
