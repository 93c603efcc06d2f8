package smcloop

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/smcloop/smcloop/internal/verbs"
	"github.com/smcloop/smcloop/test/uml/umltest"
)

// backendTableTests are the tests that run the core's semantics on every backend of the
// table (forEachBackend): corking, MSG_MORE and NoDelay, autocorking, autosplit,
// sendfile, WriteTo and ReadFrom, window updates, the close states and deadlines.
var backendTableTests = []struct {
	name string
	f    func(*testing.T)
}{
	{"CloseStates", TestCloseStates},
	{"Deadlines", TestDeadlines},
	{"CorkHoldsUntilUncork", TestCorkHoldsUntilUncork},
	{"CorkPushesWhenFull", TestCorkPushesWhenFull},
	{"WriteMoreAndNoDelay", TestWriteMoreAndNoDelay},
	{"CloseFlushesCorkedBytes", TestCloseFlushesCorkedBytes},
	{"Autocork", TestAutocork},
	{"AutosplitBoundaries", TestAutosplitBoundaries},
	{"SendfileExact", TestSendfileExact},
	{"WriteToFile", TestWriteToFile},
	{"ReadFromStreamPublishesEachPiece", TestReadFromStreamPublishesEachPiece},
	{"WindowUpdatePublication", TestWindowUpdatePublication},
}

// TestBackendsInUML runs the semantics table inside a User-Mode Linux instance with
// soft-RoCE (docs/UML.md), the test binary built with the rdma tag, where the table
// gains "smcr-rxe": SMC-R over the real verbs of rxe0 through the libibverbs binding,
// two device contexts whose link reaches itself over rxe's loopback. The fake, SMC-D and
// SMC-R on the fake fabric run beside it, from the same table; then nettest.TestConn on
// SMC-R over rxe0. On the host it runs through umltest.Run, which skips it when no UML
// kernel is built.
func TestBackendsInUML(t *testing.T) {
	if !umltest.Enabled() {
		umltest.Run(t, umltest.Config{Instances: 1, Tags: []string{"rdma"}, Timeout: 240 * time.Second})
		return
	}
	require.True(t, verbs.Available(), "built without the rdma tag")
	saved := backends
	t.Cleanup(func() { backends = saved })
	backends = append(backends[:len(backends):len(backends)], struct {
		name string
		pipe pairFunc
	}{"smcr-rxe", smcrRxePipe})
	for _, tc := range backendTableTests {
		t.Run(tc.name, tc.f)
	}
	// net.Conn conformance on the plain, asynchronous backend over rxe0.
	t.Run("Nettest/smcr-rxe", func(t *testing.T) {
		nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
			env := newSMCREnvOn(t, verbs.System(), verbs.System())
			a, b := env.pair(t, Config{}, Config{}, true, false)
			return a, b, func() { a.Close(); b.Close() }, nil
		})
	})
}

// smcrRxePipe is smcrPipe on rxe0: a link group on each of two contexts of the device,
// the link set up as the handshake would, one connection on each.
func smcrRxePipe(t testing.TB, dcfg, lcfg Config) (client, server *Conn) {
	t.Helper()
	env := newSMCREnvOn(t, verbs.System(), verbs.System())
	return env.pair(t, dcfg, lcfg, true, true)
}
