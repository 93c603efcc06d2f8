// Package test holds the cross-process tests of smcloop: the test binary runs the
// tests and, started again with SMCLOOP_TEST_ROLE set, plays the peer process.
//
// Every byte of an SMC-D connection between the two processes goes through memfd
// DMBs mapped in both of them; the tests check the bytes, the close and error
// semantics, what happens when the peer process is killed, and that no descriptor,
// mapping or DMB memory outlives its connection.
//
// Settings (environment):
//
//	SMCLOOP_TEST_STREAM_BYTES  bytes per direction of TestCrossProcessStream1GiB
//	                           (default 1 GiB, 64 MiB with -short)
//	SMCLOOP_TEST_SEED          seed of the random payloads and I/O sizes
//	                           (default: from the clock; every test logs its seed)
package test

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Environment variables read by the suite.
const (
	roleEnv        = "SMCLOOP_TEST_ROLE"
	streamBytesEnv = "SMCLOOP_TEST_STREAM_BYTES"
	seedEnv        = "SMCLOOP_TEST_SEED"
)

// testEnv holds the SMCLOOP_TEST_* variables the process started with.
var testEnv = map[string]string{}

func TestMain(m *testing.M) {
	// smcloop refuses unknown SMCLOOP_* variables in Dial and Listen (a typo must not
	// pass silently), so the suite's own SMCLOOP_TEST_* variables leave the environment
	// before the library reads it. Children therefore inherit none of them either; a
	// child gets its role explicitly.
	for _, kv := range os.Environ() {
		name, val, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SMCLOOP_TEST_") {
			testEnv[name] = val
			os.Unsetenv(name)
		}
	}
	if role, ok := testEnv[roleEnv]; ok {
		if err := runPeer(role, os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "peer %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
