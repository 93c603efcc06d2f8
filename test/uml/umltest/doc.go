// Package umltest runs Go tests inside User-Mode Linux instances with soft-RoCE, the rig of
// test/uml (see docs/UML.md): real RDMA verbs on rxe0, and a second host at 10.0.0.2.
//
// A test that needs the rig is an ordinary test that, on the host, re-runs itself inside
// one or two instances and, inside, does the work for its role:
//
//	func TestStream(t *testing.T) {
//		if !umltest.Enabled() {
//			umltest.Run(t, umltest.Config{Instances: 2})
//			return
//		}
//		env, err := umltest.Current()
//		require.NoError(t, err)
//		switch env.Role {
//		case umltest.RoleServer: // listen on env.Addr
//		case umltest.RoleClient: // dial env.Peer
//		}
//	}
//
// On the host, Run builds the calling package's test binary (go test -c), runs it through
// test/uml/run.sh with -test.run anchored to the calling test, logs each instance's console
// and fails the test for any instance whose command did not exit 0. When no UML kernel is
// built (make uml-kernel), Run skips the test with the command that builds one, so
// go test ./... on a machine without the kernel skips rather than fails.
//
// Inside an instance the process has the UMLTEST_* environment run.sh sets; Current reads
// it. The variables deliberately do not start with SMCLOOP_: smcloop's Dial and Listen
// refuse unknown SMCLOOP_* variables, and a test inside an instance dials.
package umltest
