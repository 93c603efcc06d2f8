package smcloop

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
)

// tcpStates returns the states (hex, as /proc/net/tcp shows them) of the sockets with
// local port lport and remote port rport.
func tcpStates(t *testing.T, lport, rport int) []string {
	t.Helper()
	var states []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 || !strings.Contains(fs[1], ":") {
				continue
			}
			if strings.HasSuffix(fs[1], fmt.Sprintf(":%04X", lport)) && strings.HasSuffix(fs[2], fmt.Sprintf(":%04X", rport)) {
				states = append(states, fs[3])
			}
		}
		fh.Close()
	}
	return states
}

// TestCloseLeavesNoTimeWait: an SMC connection releases its TCP connection with a reset
// where the peer has nothing left to read on it (ARCHITECTURE.md, "Liveness and close"),
// so neither end keeps a TIME_WAIT socket, whichever side closes first. Both still see
// the SMC close: the reader gets every byte, then io.EOF.
func TestCloseLeavesNoTimeWait(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, serverFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("serverFirst=%v", serverFirst), func(t *testing.T) {
			c, s := dialAccept(t, ln, Config{})
			if !c.UsingSMC() {
				t.Fatalf("not SMC: %s", c.Mode())
			}
			cport := c.LocalAddr().(*net.TCPAddr).Port
			sport := s.LocalAddr().(*net.TCPAddr).Port
			first, second := s, c
			if !serverFirst {
				first, second = c, s
			}
			msg := []byte("last words")
			if _, err := first.Write(msg); err != nil {
				t.Fatal(err)
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(second)
			if err != nil || string(got) != string(msg) {
				t.Fatalf("read after the peer's close: %q, %v", got, err)
			}
			if err := second.Close(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
				return len(tcpStates(t, cport, sport)) == 0 && len(tcpStates(t, sport, cport)) == 0
			})
		})
	}
}
