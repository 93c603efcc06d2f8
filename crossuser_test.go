package smcloop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/asnobody"
	"github.com/smcloop/smcloop/internal/presence"
)

// Cross-user tests: the test process runs as root and plays the victim; the attacker is
// the test binary started again as nobody (TestCrossUserChild with a role), a local user
// who can reach every abstract socket name and every local TCP port. Each test fails on a
// build that shares memory, tokens or tables with another user's process.

const crossUserRole = "CROSSUSER_ROLE"

// attacker is a child process running as nobody.
type attacker struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startAttacker(t *testing.T, role string, args ...string) *attacker {
	t.Helper()
	cmd := asnobody.Command(t, "-test.run=^TestCrossUserChild$")
	cmd.Env = append(os.Environ(), crossUserRole+"="+role, "CROSSUSER_ARGS="+strings.Join(args, " "))
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	a := &attacker{t: t, cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if l, ok := strings.CutPrefix(s.Text(), "ATTACKER "); ok {
				a.lines <- l
			}
		}
		close(a.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return a
}

// line returns the attacker's next report (a watchdog bounds the wait).
func (a *attacker) line() string {
	a.t.Helper()
	select {
	case l, ok := <-a.lines:
		require.True(a.t, ok, "attacker exited without reporting")
		return l
	case <-time.After(time.Minute):
		a.t.Fatal("attacker reported nothing for a minute")
		return ""
	}
}

// TestCrossUserChild is the attacker's side; it does nothing in a normal test run.
func TestCrossUserChild(t *testing.T) {
	role := os.Getenv(crossUserRole)
	if role == "" {
		t.Skip("attacker role of the cross-user tests")
	}
	args := strings.Fields(os.Getenv("CROSSUSER_ARGS"))
	report := func(format string, a ...any) { fmt.Printf("ATTACKER "+format+"\n", a...) }
	waitParent := func() { io.Copy(io.Discard, os.Stdin) }
	switch role {
	case "link":
		// Link to the victim listener's registration table, as a dialer would.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if presence.LookupContext(ctx, netip.MustParseAddrPort(args[0])) != nil {
			report("linked")
		} else {
			report("refused")
		}
	case "propose":
		// Speak CLC to the victim server as if we had an SMC-D device: the victim's own.
		hi, _ := strconv.ParseUint(args[1], 16, 64)
		ext, _ := strconv.ParseUint(args[2], 16, 64)
		c, err := net.Dial("tcp", args[0])
		if err != nil {
			report("dial %v", err)
			return
		}
		defer c.Close()
		prop := &clc.Proposal{
			Version: clc.V2, TypeV1: clc.PathN, TypeV2: clc.PathD, Release: clc.Release1,
			UEIDs: [][clc.EIDLen]byte{defaultUEID()}, FeatureMask: clc.FeatureEmulatedISM,
		}
		prop.AddISMDevice(hi, ext, 0xFFFF)
		msg, err := prop.Append(nil)
		if err != nil {
			report("encode %v", err)
			return
		}
		c.Write(msg)
		report("%s", describeCLC(c))
	case "fakeserver":
		// A server that answers a Proposal with an Accept naming someone else's device.
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			report("listen %v", err)
			return
		}
		report("%s", ln.Addr())
		c, err := ln.Accept()
		if err != nil {
			report("accept %v", err)
			return
		}
		defer c.Close()
		report("%s", describeCLC(c))
		waitParent()
	case "squat":
		// Hold the exact-address listener name in front of the victim's wildcard
		// listener, with a well-formed registration table behind it.
		adv, err := presence.Advertise(netip.MustParseAddrPort(args[0]))
		if err != nil {
			report("squat %v", err)
			return
		}
		defer adv.Close()
		report("squatting")
		waitParent()
	default:
		t.Fatalf("unknown role %q", role)
	}
}

// describeCLC reads one CLC message from c and describes it: "proposal", "accept
// token=…", "decline code=…", or what went wrong.
func describeCLC(c net.Conn) string {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf [clc.MaxProposalLen]byte
	_, raw, err := clc.ReadMsg(c, 0, buf[:])
	if err != nil {
		return "read " + err.Error()
	}
	m, err := clc.Parse(raw)
	if err != nil {
		return "parse " + err.Error()
	}
	switch m := m.(type) {
	case *clc.Proposal:
		return "proposal"
	case *clc.AcceptConfirm:
		return fmt.Sprintf("accept token=%#x", m.Token)
	case *clc.Decline:
		return fmt.Sprintf("decline code=%#08x", m.Code)
	}
	return fmt.Sprintf("message %T", m)
}

func defaultUEID() (u [clc.EIDLen]byte) {
	s, err := (&Config{}).resolve()
	if err == nil {
		u = s.ueid
	}
	return u
}

// TestCrossUserCannotLink: another user's process cannot link to a listener's
// registration table, so it can neither read nor forge announcements.
func TestCrossUserCannotLink(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	a := startAttacker(t, "link", ln.Addr().String())
	assert.Equal(t, "refused", a.line())
}

// TestCrossUserServerDeclines: a client of another user that speaks CLC anyway, naming
// the server's own ISM device, gets a Decline: no Accept, no DMB token, no attach on its
// behalf. The server's connection is TCP with reason NOSMCD2DEV.
func TestCrossUserServerDeclines(t *testing.T) {
	cfg, err := (&Config{}).resolve()
	require.NoError(t, err)
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer tl.Close()
	gid := cfg.device.GID()
	a := startAttacker(t, "propose", tl.Addr().String(), fmt.Sprintf("%x", gid.Hi), fmt.Sprintf("%x", gid.Ext))
	tcp, err := tl.Accept()
	require.NoError(t, err)
	defer tcp.Close()
	before := cfg.device.Stats()
	c, err := serverHandshake(context.Background(), tcp, cfg, "tcp4")
	require.NoError(t, err)
	assert.False(t, c.isSMC(), "SMC-D with a process of another user")
	assert.Equal(t, clc.DeclNoSMCD2Dev, c.localReason)
	assert.Equal(t, fmt.Sprintf("decline code=%#08x", clc.DeclNoSMCD2Dev), a.line())
	after := cfg.device.Stats()
	assert.Equal(t, before.DMBsCreated, after.DMBsCreated, "a DMB was registered for the attacker")
}

// TestCrossUserClientDeclines: a dialer whose TCP peer belongs to another user sends a
// Decline instead of its Proposal, so the server learns nothing of its device and its
// forged Accept is never read; the connection is TCP with reason NOSMCD2DEV.
func TestCrossUserClientDeclines(t *testing.T) {
	cfg, err := (&Config{}).resolve()
	require.NoError(t, err)
	a := startAttacker(t, "fakeserver")
	addr := a.line()
	tcp, err := net.Dial("tcp", addr)
	require.NoError(t, err, "attacker said %q", addr)
	defer tcp.Close()
	c, err := clientHandshake(context.Background(), tcp, cfg, "tcp")
	require.NoError(t, err)
	assert.False(t, c.isSMC(), "SMC-D with a process of another user")
	assert.Equal(t, clc.DeclNoSMCD2Dev, c.localReason)
	assert.Equal(t, fmt.Sprintf("decline code=%#08x", clc.DeclNoSMCD2Dev), a.line())
}

// TestCrossUserSquattedName: another user holding the exact-address listener name in
// front of a wildcard listener changes nothing: the dialer skips the name it does not
// trust, finds the wildcard listener's, and gets SMC-D; the server's application never
// sees CLC bytes as data.
func TestCrossUserSquattedName(t *testing.T) {
	ln, err := Listen("tcp4", "0.0.0.0:0")
	require.NoError(t, err)
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	a := startAttacker(t, "squat", dst.String())
	require.Equal(t, "squatting", a.line())

	type res struct {
		c   *Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.AcceptSMC()
		acc <- res{c, err}
	}()
	waitGroupWorkIdle(t)
	c, err := Dial("tcp", dst.String())
	require.NoError(t, err)
	defer c.Close()
	var r res
	select {
	case r = <-acc:
	case <-time.After(watchdog):
		t.Fatalf("dialed %s, but nothing accepted: listener %+v", c.Mode(), ln.Stats())
	}
	require.NoError(t, r.err)
	defer r.c.Close()
	assert.True(t, c.isSMC(), "client fell back (reason %#x)", c.localReason)
	assert.True(t, r.c.isSMC(), "server fell back (reason %#x)", r.c.localReason)

	msg := []byte("exact bytes after a squatted name")
	_, err = c.Write(msg)
	require.NoError(t, err)
	got := make([]byte, len(msg))
	_, err = io.ReadFull(r.c, got)
	require.NoError(t, err)
	assert.Equal(t, msg, got)
}
