//go:build linux

package introspect

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzRespond: any request line gets an answer of this version, the handler's only for
// a valid request of a known op.
func FuzzRespond(f *testing.F) {
	for _, s := range []string{`{"v":1,"op":"conns"}`, `{"v":1,"op":"stats"}`, `{"v":1,"op":"reset"}`, `{"v":2}`, `{`, `null`, `{"v":1,"op":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		handled := ""
		r := respond(line, func(req Request) Response {
			handled = req.Op
			return Response{Stats: &Stats{}}
		}, Process{PID: 1})
		require.Equal(t, Version, r.V, "answer %+v", r)
		require.EqualValues(t, 1, r.Process.PID, "answer %+v", r)
		switch handled {
		case OpConns, OpStats, OpReset:
			require.Empty(t, r.Error, "handled %q, answer %+v", handled, r)
			require.NotNil(t, r.Stats, "handled %q, answer %+v", handled, r)
		case "":
			require.Equal(t, ErrCodeBadRequest, r.Error, "unhandled request %q answered %+v", line, r)
		default:
			t.Fatalf("handler called for op %q", handled)
		}
	})
}

// FuzzParseUnixTable: every pid found is positive and named by a listening line.
func FuzzParseUnixTable(f *testing.F) {
	f.Add([]byte("Num RefCount Protocol Flags Type St Inode Path\n0: 00000002 00000000 00010000 0001 01 1 @smcloop-introspect-42\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, pid := range parseUnixTable(b) {
			require.Positive(t, pid, "pid from %q", b)
			require.Contains(t, string(b), "@"+NamePrefix+strconv.Itoa(pid), "pid %d from %q", pid, b)
		}
	})
}
