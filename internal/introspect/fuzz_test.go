//go:build linux

package introspect

import (
	"strconv"
	"strings"
	"testing"
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
		if r.V != Version || r.Process.PID != 1 {
			t.Fatalf("answer %+v", r)
		}
		switch {
		case handled == OpConns || handled == OpStats || handled == OpReset:
			if r.Error != "" || r.Stats == nil {
				t.Fatalf("handled %q, answer %+v", handled, r)
			}
		case handled != "":
			t.Fatalf("handler called for op %q", handled)
		case r.Error != ErrCodeBadRequest:
			t.Fatalf("unhandled request %q answered %+v", line, r)
		}
	})
}

// FuzzParseUnixTable: every pid found is positive and named by a listening line.
func FuzzParseUnixTable(f *testing.F) {
	f.Add([]byte("Num RefCount Protocol Flags Type St Inode Path\n0: 00000002 00000000 00010000 0001 01 1 @smcloop-introspect-42\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, pid := range parseUnixTable(b) {
			if pid <= 0 || !strings.Contains(string(b), "@"+NamePrefix+strconv.Itoa(pid)) {
				t.Fatalf("pid %d from %q", pid, b)
			}
		}
	})
}
