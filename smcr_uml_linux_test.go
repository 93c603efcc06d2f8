package smcloop

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/remotecap"
	"github.com/smcloop/smcloop/smcr"
	"github.com/smcloop/smcloop/test/uml/umltest"
)

// SMC-R between two hosts on real verbs: two User-Mode Linux instances of test/uml
// (docs/UML.md) with soft-RoCE (rxe0), 10.0.0.1 the server and 10.0.0.2 the client, the
// test binary built with the rdma tag. On the host these tests run through umltest.Run,
// which skips them when no UML kernel is built (make uml-kernel). UML timings are
// functional, not performance figures.

const (
	umlSMCRPort     = 18701
	umlSMCRKillPort = 18702
	umlSMCRBulk     = 256 << 20 // bytes each way
	umlCapture      = "smcr-handshake.pcapng"
)

// TestSMCRInUML: the dialer's first connection to the listener is plain (the destination
// is unknown to the cross-host signal until its probe answers); the next one is SMC-R,
// first contact, and moves 256 MiB each way at once, SHA-256 checked, with no data byte
// on TCP and rxe's packet counters covering the bytes; a third joins the link group.
// The server captures the handshakes on eth0, and the host decodes the capture with
// tshark as SMC-Rv2 Proposal, Accept and Confirm.
func TestSMCRInUML(t *testing.T) {
	if !umltest.Enabled() {
		res := umltest.Run(t, umltest.Config{Instances: 2, Tags: []string{"rdma"}, Timeout: 150 * time.Second, Memory: "1G"})
		if t.Failed() || len(res) == 0 {
			return
		}
		checkCapture(t, filepath.Join(res[0].Dir, umlCapture))
		return
	}
	env, err := umltest.Current()
	require.NoError(t, err)
	require.True(t, localRDMA(), "the rdma tag and rxe0 are needed")
	if env.Role == umltest.RoleServer {
		smcrUMLServer(t, env)
	} else {
		smcrUMLClient(t, env)
	}
}

// checkCapture decodes the server's capture and requires the three SMC-Rv2 messages of
// the first contact.
func checkCapture(t *testing.T, path string) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark is not installed: the capture is not decoded")
	}
	out, err := exec.Command("tshark", "-r", path, "-o", "tcp.try_heuristic_first:TRUE", "-Y", "smc").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("tshark -Y smc:\n%s", out)
	for _, m := range []string{"[SMC-Rv2-Proposal]", "[SMC-Rv2-Accept]", "[SMC-Rv2-Confirm]"} {
		assert.Contains(t, string(out), m)
	}
}

// rxeCounter reads one of rxe0's port counters.
func rxeCounter(t *testing.T, name string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/sys/class/infiniband/rxe0/ports/1/hw_counters/" + name)
	require.NoError(t, err)
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	return v
}

// rxeCounters lists rxe0's non-zero port counters, for a failure's message.
func rxeCounters() string {
	dir := "/sys/class/infiniband/rxe0/ports/1/hw_counters/"
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(dir + e.Name())
		if v := strings.TrimSpace(string(b)); err == nil && v != "0" {
			out = append(out, e.Name()+"="+v)
		}
	}
	return strings.Join(out, " ")
}

// startCapture records the frames of eth0 to or from TCP port port into a pcap file in
// dir (an AF_PACKET socket: what tcpdump does, without a capture tool in the instance),
// until the returned stop is called.
func startCapture(t *testing.T, dir string, port int) (stop func()) {
	t.Helper()
	ifi, err := net.InterfaceByName("eth0")
	require.NoError(t, err)
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto)
	require.NoError(t, err)
	require.NoError(t, unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}))
	// Reads return at least every 100 ms, so that stop is prompt.
	require.NoError(t, unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000}))
	f, err := os.Create(filepath.Join(dir, umlCapture))
	require.NoError(t, err)
	w := bufio.NewWriter(f)
	var hdr [24]byte // pcap: magic, version 2.4, zone, sigfigs, snaplen, Ethernet
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535)
	binary.LittleEndian.PutUint32(hdr[20:], 1)
	w.Write(hdr[:])
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			select {
			case <-quit:
				return
			default:
			}
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil || !tcpPort(buf[:n], port) {
				continue
			}
			now := time.Now()
			var rec [16]byte
			binary.LittleEndian.PutUint32(rec[0:], uint32(now.Unix()))
			binary.LittleEndian.PutUint32(rec[4:], uint32(now.Nanosecond()/1000))
			binary.LittleEndian.PutUint32(rec[8:], uint32(n))
			binary.LittleEndian.PutUint32(rec[12:], uint32(n))
			w.Write(rec[:])
			w.Write(buf[:n])
		}
	}()
	return func() {
		close(quit)
		<-done
		unix.Close(fd)
		require.NoError(t, w.Flush())
		require.NoError(t, f.Close())
	}
}

// tcpPort reports whether the Ethernet frame is IPv4 TCP from or to port.
func tcpPort(b []byte, port int) bool {
	if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:]) != unix.ETH_P_IP || b[14+9] != unix.IPPROTO_TCP {
		return false
	}
	ihl := int(b[14]&0x0f) * 4
	if len(b) < 14+ihl+4 {
		return false
	}
	src, dst := binary.BigEndian.Uint16(b[14+ihl:]), binary.BigEndian.Uint16(b[14+ihl+2:])
	return int(src) == port || int(dst) == port
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// streamBoth writes n bytes of the stream seeded with mine and reads n bytes at once;
// then each side sends the SHA-256 of what it wrote, and what was read must match the
// peer's.
func streamBoth(t *testing.T, c *Conn, mine uint64, n int) {
	t.Helper()
	wrote := make(chan [32]byte, 1)
	werr := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewChaCha8([32]byte{byte(mine)}))
		h := sha256.New()
		buf := make([]byte, 1<<20)
		for left := n; left > 0; left -= len(buf) {
			b := buf[:min(len(buf), left)]
			for i := 0; i < len(b); i += 8 {
				binary.LittleEndian.PutUint64(b[i:], r.Uint64())
			}
			h.Write(b)
			if _, err := c.Write(b); err != nil {
				werr <- err
				return
			}
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		wrote <- sum
		werr <- nil
	}()
	h := sha256.New()
	got, err := io.CopyN(h, c, int64(n))
	if err != nil {
		var link error
		if sc, ok := c.backend.(*smcr.Conn); ok {
			link = sc.Group().Err()
		}
		t.Fatalf("reading the peer's %d bytes: %v after %d bytes (link: %v; stats %+v; rxe0: %s)", n, err, got, link, c.Stats(), rxeCounters())
	}
	require.NoError(t, <-werr)
	mySum := <-wrote
	_, err = c.Write(mySum[:])
	require.NoError(t, err)
	var theirs [32]byte
	_, err = io.ReadFull(c, theirs[:])
	require.NoError(t, err)
	assert.Equal(t, theirs[:], h.Sum(nil), "SHA-256 of the %d bytes read, against the writer's", n)
}

func smcrUMLServer(t *testing.T, env umltest.Env) {
	ln, err := Listen("tcp4", net.JoinHostPort(env.Addr, strconv.Itoa(umlSMCRPort)))
	require.NoError(t, err)
	defer ln.Close()
	stop := startCapture(t, env.Out, umlSMCRPort)
	// The client's barrier (net.Dial) and its first smcloop dial, plain while the
	// destination is unknown, come first; then SMC-R, first contact, bulk both ways.
	c := acceptSMCR(t, ln)
	sent0, rcvd0 := rxeCounter(t, "sent_pkts"), rxeCounter(t, "rcvd_pkts")
	start := time.Now()
	streamBoth(t, c, 1, umlSMCRBulk)
	took := time.Since(start)
	sent, rcvd := rxeCounter(t, "sent_pkts")-sent0, rxeCounter(t, "rcvd_pkts")-rcvd0
	st := c.Stats()
	t.Logf("256 MiB each way in %v (functional, not a performance figure); rxe0 sent %d packets, received %d; TCP after the handshake: %d sent, %d received",
		took, sent, rcvd, st.TCPBytesSent, st.TCPBytesRecv)
	assert.Zero(t, st.TCPBytesSent, "data bytes on TCP")
	assert.Zero(t, st.TCPBytesRecv, "data bytes on TCP")
	// RoCE carries at most one path MTU (at most 4096 bytes) per packet.
	assert.GreaterOrEqual(t, sent, uint64(umlSMCRBulk/4096), "rxe0 packets sent for 256 MiB")
	assert.GreaterOrEqual(t, rcvd, uint64(umlSMCRBulk/4096), "rxe0 packets received for 256 MiB")
	require.NoError(t, c.Close())
	// A second SMC-R connection joins the link group (no first contact).
	c = acceptSMCR(t, ln)
	streamBoth(t, c, 3, 1<<20)
	require.NoError(t, c.Close())
	stop()
	dev := rdmaDevice(smcr.Server)
	require.NotNil(t, dev)
	t.Logf("server device: %+v", dev.Live())
}

func smcrUMLClient(t *testing.T, env umltest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dst := net.JoinHostPort(env.Peer, strconv.Itoa(umlSMCRPort))
	c, err := env.DialPeer(ctx, umlSMCRPort) // the barrier: the listener is up
	require.NoError(t, err)
	c.Close()
	first, err := Dial("tcp4", dst)
	require.NoError(t, err)
	local, _ := first.FallbackReason()
	assert.Equal(t, clc.DeclPeerNoSMC, local, "unknown destination: plain at once")
	first.Close()

	sc := dialSMCR(t, dst)
	streamBoth(t, sc, 2, umlSMCRBulk)
	require.NoError(t, sc.Close())

	sc = dialSMCR(t, dst)
	streamBoth(t, sc, 4, 1<<20)
	require.NoError(t, sc.Close())
}

// dialSMCR dials dst until the connection is SMC-R, at most four times: after the
// capability probe answered, an announcement whose acknowledgement comes too late (a
// loaded host) turns one dial into plain TCP, as it should; the plain ones are closed.
func dialSMCR(t *testing.T, dst string) *Conn {
	t.Helper()
	for i := 0; ; i++ {
		remotecap.Default.Wait() // the destination's probe has answered
		c, err := Dial("tcp4", dst)
		require.NoError(t, err)
		if c.Mode() == "SMCR" {
			return c
		}
		t.Logf("dial %d to %s: %s", i+1, dst, c.Mode())
		c.Close()
		require.Less(t, i, 3, "no SMC-R connection in four dials")
	}
}

// acceptSMCR returns the next SMC-R connection of ln; the plain ones before it (a
// barrier, a process's first dial while the destination is unknown to it, a dial whose
// announcement was acknowledged too late) are drained and closed.
func acceptSMCR(t *testing.T, ln *Listener) *Conn {
	t.Helper()
	for {
		c, err := ln.AcceptSMC()
		require.NoError(t, err)
		if c.Mode() == "SMCR" {
			return c
		}
		// Said, so that a dialer left waiting for an Accept (a plain delivery of its
		// announced connection: NotCLC) shows here.
		t.Logf("accepted %s from %s; signal %+v", c.Mode(), c.RemoteAddr(), ln.RemoteSignal())
		io.Copy(io.Discard, c)
		c.Close()
	}
}

// TestSMCRPeerKilledInUML: a client process streaming over SMC-R is killed (SIGKILL)
// mid-transfer. The server's Read fails within a second of the last bytes, with
// ErrPeerGone; the link group of the dead process is terminated and its queue pair and
// memory regions released (the device's counts back to what they were before it
// connected); and a new connection from another process works.
func TestSMCRPeerKilledInUML(t *testing.T) {
	if os.Getenv("SMCR_UML_CHILD") != "" {
		smcrUMLKilledChild(t)
		return
	}
	if !umltest.Enabled() {
		umltest.Run(t, umltest.Config{Instances: 2, Tags: []string{"rdma"}, Timeout: 200 * time.Second})
		return
	}
	env, err := umltest.Current()
	require.NoError(t, err)
	require.True(t, localRDMA(), "the rdma tag and rxe0 are needed")
	if env.Role == umltest.RoleServer {
		smcrUMLKillServer(t, env)
	} else {
		smcrUMLKillClient(t, env)
	}
}

func smcrUMLKillServer(t *testing.T, env umltest.Env) {
	ln, err := Listen("tcp4", net.JoinHostPort(env.Addr, strconv.Itoa(umlSMCRKillPort)))
	require.NoError(t, err)
	defer ln.Close()
	dev := rdmaDevice(smcr.Server)
	require.NotNil(t, dev)
	before := dev.Live()
	// The child: SMC-R, streaming until it is killed.
	c := acceptSMCR(t, ln)
	g := c.backend.(*smcr.Conn).Group()
	assert.Greater(t, dev.Live().QPs, before.QPs, "the child's link group has a queue pair")
	buf := make([]byte, 1<<20)
	var total int
	last := time.Now()
	for {
		n, err := c.Read(buf)
		total += n
		if n > 0 {
			last = time.Now()
		}
		if err != nil {
			gap := time.Since(last)
			t.Logf("read %d bytes, then %v after the last bytes: %v", total, gap, err)
			// ErrPeerGone when the TCP connection's end comes first, ErrPeerReset when
			// the link's failure to reach the dead queue pair does.
			assert.True(t, errors.Is(err, ErrPeerGone) || errors.Is(err, ErrPeerReset), "%v", err)
			assert.Less(t, gap, time.Second, "the survivor's error comes within a second")
			break
		}
	}
	assert.GreaterOrEqual(t, total, 16<<20, "the child streamed before it was killed")
	c.Close()
	// Its link group goes with it.
	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the dead peer's link group is still up 5 s after its process died")
	}
	assert.Equal(t, before, dev.Live(), "the dead peer's queue pair and memory regions are released")
	// A new connection from the surviving client process works. It dials once this
	// listener is up: after the counts above.
	gate, err := net.Listen("tcp4", net.JoinHostPort(env.Addr, strconv.Itoa(umlSMCRKillPort+1)))
	require.NoError(t, err)
	defer gate.Close()
	gc, err := gate.Accept()
	require.NoError(t, err)
	gc.Close()
	c = acceptSMCR(t, ln)
	streamBoth(t, c, 5, 4<<20)
	require.NoError(t, c.Close())
}

func smcrUMLKillClient(t *testing.T, env umltest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dst := net.JoinHostPort(env.Peer, strconv.Itoa(umlSMCRKillPort))
	c, err := env.DialPeer(ctx, umlSMCRKillPort) // the barrier: the listener is up
	require.NoError(t, err)
	c.Close()

	// The child dials (its own process: its own link group) and streams; it says when
	// it has written 32 MiB, and is killed then.
	cmd := exec.Command(os.Args[0], "-test.run=^TestSMCRPeerKilledInUML$")
	cmd.Env = append(os.Environ(), "SMCR_UML_CHILD="+dst)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.Contains(sc.Text(), "streaming 32 MiB") {
	}
	require.NoError(t, cmd.Process.Kill())
	werr := cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(werr, &ee), "the child was killed: %v", werr)

	// This process: once the server has counted what the child left, its first dial is
	// plain (unknown destination), then SMC-R.
	gc, err := env.DialPeer(ctx, umlSMCRKillPort+1)
	require.NoError(t, err)
	gc.Close()
	first, err := Dial("tcp4", dst)
	require.NoError(t, err)
	first.Close()
	sc2 := dialSMCR(t, dst)
	streamBoth(t, sc2, 6, 4<<20)
	require.NoError(t, sc2.Close())
}

// smcrUMLKilledChild is the process that gets killed: it primes the cross-host signal,
// dials SMC-R and writes until it dies.
func smcrUMLKilledChild(t *testing.T) {
	dst := os.Getenv("SMCR_UML_CHILD")
	require.True(t, localRDMA(), "the rdma tag and rxe0 are needed") // known before the first dial
	if first, err := Dial("tcp4", dst); err == nil {
		first.Close() // this process's first dial to dst: plain, and a probe
	}
	c := dialSMCR(t, dst)
	buf := make([]byte, 1<<20)
	for i := 0; ; i++ {
		if _, err := c.Write(buf); err != nil {
			t.Fatalf("write: %v", err)
		}
		if i == 32 {
			fmt.Println("streaming 32 MiB")
		}
	}
}
