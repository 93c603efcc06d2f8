package smcloop

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWakeupCallsAreRaw: the system calls on a wake-up's path that never block (the
// doorbell's send and its dispatcher's read, ism; the futex wake of a short sleeper,
// smcd) are raw system calls. Through syscall.Syscall (unix.Read, unix.Send) each entered
// the runtime's syscall state, which in a process whose Ps were all idle also wakes the
// sysmon thread: one more thread woken on another CPU per doorbell, 1.2 more voluntary
// context switches per gRPC unary call and side, and 20% more CPU per call
// (docs/HISTORY.md, "Raw doorbell calls"). No behaviour shows the difference
// deterministically, so the calls themselves are checked.
func TestWakeupCallsAreRaw(t *testing.T) {
	for _, tc := range []struct{ file, fn string }{
		{"ism/sys_linux.go", "readFd"},
		{"ism/sys_linux.go", "sendNonblock"},
		{"smcd/futex_linux.go", "futexWake"},
	} {
		t.Run(tc.fn, func(t *testing.T) {
			f, err := parser.ParseFile(token.NewFileSet(), tc.file, nil, 0)
			require.NoError(t, err)
			var body *ast.BlockStmt
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == tc.fn {
					body = fd.Body
				}
			}
			require.NotNil(t, body, "%s has no func %s", tc.file, tc.fn)
			var calls []string
			ast.Inspect(body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
						if pkg, ok := sel.X.(*ast.Ident); ok && (pkg.Name == "unix" || pkg.Name == "syscall") {
							calls = append(calls, pkg.Name+"."+sel.Sel.Name)
						}
					}
				}
				return true
			})
			raw := 0
			for _, c := range calls {
				switch c {
				case "unix.RawSyscall", "unix.RawSyscall6", "syscall.RawSyscall", "syscall.RawSyscall6":
					raw++
				default:
					t.Errorf("%s: %s calls %s, which enters the runtime's syscall state", tc.file, tc.fn, c)
				}
			}
			assert.Equal(t, 1, raw, "%s: %s makes one raw system call (calls: %v)", tc.file, tc.fn, calls)
		})
	}
}
