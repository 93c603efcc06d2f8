package test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/stretchr/testify/require"
)

// lineTimeout bounds every wait for a line from a peer process. It is a watchdog, not
// a requirement: generous enough for a loaded two-core machine under the race detector.
const lineTimeout = 2 * time.Minute

// dmbName is the memfd name of every DMB; /proc shows "/memfd:smcloop-dmb (deleted)".
const dmbName = "smcloop-dmb"

// peer is a peer process: the test binary started again with a role.
type peer struct {
	t      *testing.T
	role   string
	cmd    *exec.Cmd
	stdin  *os.File
	lines  chan string
	stderr lockedBuffer

	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // cmd.Wait's result, set before exited closes
	stop    chan struct{} // closed when the test ends: stop reading lines
}

// startPeer starts a peer process in role. It is killed (if still running) and waited
// for when the test ends.
func startPeer(t *testing.T, role string, args ...string) *peer {
	t.Helper()
	return startProcess(t, role, args, roleEnv+"="+role)
}

// startProcess starts this test binary again with args and the environment plus env,
// as the peer role (a name for messages). Its stdin and stdout carry the peer line
// protocol; it is killed (if still running) and waited for when the test ends, and its
// stderr is logged if the test failed. A race-enabled peer is told not to linger in
// exit.
func startProcess(t *testing.T, role string, args []string, env ...string) *peer {
	t.Helper()
	p := &peer{t: t, role: role, lines: make(chan string, 64), exited: make(chan struct{}), stop: make(chan struct{})}
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		t.Fatal(err)
	}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), env...)
	if race := os.Getenv("GORACE"); !strings.Contains(race, "atexit_sleep_ms") {
		p.cmd.Env = append(p.cmd.Env, strings.TrimSpace("GORACE="+race+" atexit_sleep_ms=0"))
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = inR, outW, &p.stderr
	err = p.cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		t.Fatalf("starting the %s peer: %v", role, err)
	}
	p.stdin = inW
	go func() {
		p.waitErr = p.cmd.Wait()
		p.stdin.Close() // this end of the pipe must not outlive the process
		close(p.exited)
	}()
	go func() {
		defer close(p.lines)
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-p.stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(p.stop)
		p.stdin.Close()
		p.cmd.Process.Kill() // harmless once the process has exited
		<-p.exited
		if t.Failed() {
			t.Logf("%s peer (pid %d) stderr:\n%s", role, p.pid(), p.stderr.String())
		}
	})
	return p
}

func (p *peer) pid() int { return p.cmd.Process.Pid }

// send writes one command line to the peer.
func (p *peer) send(format string, args ...any) {
	p.t.Helper()
	_, err := fmt.Fprintf(p.stdin, format+"\n", args...)
	require.NoError(p.t, err, "%s peer: sending %q", p.role, fmt.Sprintf(format, args...))
}

// expect returns the rest of the next line from the peer, which must be
// "<prefix> <rest>". It fails the test on an ERR line, on another prefix, when the peer
// exits, and after lineTimeout.
func (p *peer) expect(prefix string) string {
	p.t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			select { // stdout closes as the process exits
			case <-p.exited:
			case <-time.After(lineTimeout):
			}
			p.t.Fatalf("%s peer exited (%v) while %q was expected", p.role, p.waitErr, prefix)
		}
		if line == prefix {
			return ""
		}
		if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
			return rest
		}
		p.t.Fatalf("%s peer said %q, want %q", p.role, line, prefix+" ...")
	case <-time.After(lineTimeout):
		p.t.Fatalf("%s peer: no %q line within %v", p.role, prefix, lineTimeout)
	}
	return ""
}

// expectJSON reads "<prefix> {json}" into v.
func (p *peer) expectJSON(prefix string, v any) {
	p.t.Helper()
	line := p.expect(prefix)
	require.NoError(p.t, json.Unmarshal([]byte(line), v), "%s peer: %s line %q", p.role, prefix, line)
}

// addr waits for the peer's listening address.
func (p *peer) addr() string {
	p.t.Helper()
	return p.expect("ADDR")
}

// reply waits for the script peer's "OK <cmd> ..." and returns its fields after cmd.
func (p *peer) reply(cmd string) []string {
	p.t.Helper()
	return strings.Fields(p.expect("OK " + cmd))
}

// do runs one script command and returns the fields of its reply.
func (p *peer) do(format string, args ...any) []string {
	p.t.Helper()
	line := fmt.Sprintf(format, args...)
	p.send("%s", line)
	return p.reply(strings.Fields(line)[0])
}

// stats runs the script command "stats".
func (p *peer) stats() smcloop.ConnStats {
	p.t.Helper()
	return p.parseStats(p.do("stats"))
}

// parseStats parses the Stats JSON of an "accept" or "stats" reply.
func (p *peer) parseStats(f []string) smcloop.ConnStats {
	p.t.Helper()
	var s smcloop.ConnStats
	require.Len(p.t, f, 1, "%s peer: stats reply %q", p.role, f)
	require.NoError(p.t, json.Unmarshal([]byte(f[0]), &s), "%s peer: stats reply %q", p.role, f)
	return s
}

// kill sends SIGKILL and returns the time just before it was sent.
func (p *peer) kill() time.Time {
	p.t.Helper()
	at := time.Now()
	require.NoError(p.t, p.cmd.Process.Kill(), "killing the %s peer", p.role)
	return at
}

// wait waits for the peer to exit and returns cmd.Wait's error.
func (p *peer) wait() error {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(lineTimeout):
		p.t.Fatalf("%s peer (pid %d) did not exit within %v", p.role, p.pid(), lineTimeout)
	}
	return nil
}

// exit asks the peer to exit and requires a clean exit.
func (p *peer) exit() {
	p.t.Helper()
	p.send("exit")
	require.NoError(p.t, p.wait(), "%s peer exit", p.role)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// dial connects to a peer and requires SMC-D. The connection is closed when the test
// ends.
func dial(t *testing.T, addr string) *smcloop.Conn {
	t.Helper()
	c, err := smcloop.Dial("tcp", addr)
	require.NoError(t, err, "Dial %s", addr)
	t.Cleanup(func() { c.Close() })
	require.True(t, c.UsingSMC(), "connection to %s is not SMC: %s", addr, c.Mode())
	require.Equal(t, "SMCD", c.Mode(), "connection to %s", addr)
	return c
}

// testSeed is SMCLOOP_TEST_SEED or a fresh seed; it is logged so a failure can be
// repeated.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	if v, ok := testEnv[seedEnv]; ok {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "%s=%q", seedEnv, v)
		t.Logf("seed %d (from %s)", s, seedEnv)
		return s
	}
	s := uint64(time.Now().UnixNano())
	t.Logf("seed %d (repeat with %s=%d)", s, seedEnv, s)
	return s
}

// payload returns n bytes of the PCG stream keyed by seed; both processes derive the
// same bytes from the same seed.
func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x706179))
	b := make([]byte, (n+7)&^7)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
}

// waitUntil polls cond until it holds or timeout passes; for conditions no event
// announces, such as "a goroutine of this process went to sleep".
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// The /proc views below take a pid, or 0 for this process.

func procDir(pid int) string {
	if pid == 0 {
		return "/proc/self"
	}
	return "/proc/" + strconv.Itoa(pid)
}

// countFDs counts the open descriptors of process pid.
func countFDs(pid int) (int, error) {
	ents, err := os.ReadDir(procDir(pid) + "/fd")
	return len(ents), err
}

// countDMBMappings counts the DMB lines of /proc/<pid>/maps.
func countDMBMappings(pid int) (int, error) {
	l, err := mapsLines(pid, dmbName)
	return len(l), err
}

// mapsLines returns the lines of /proc/<pid>/maps that contain substr.
func mapsLines(pid int, substr string) ([]string, error) {
	b, err := os.ReadFile(procDir(pid) + "/maps")
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, substr) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out, nil
}

// mapsInode returns the inode column of a /proc/<pid>/maps line.
func mapsInode(line string) (uint64, bool) {
	f := strings.Fields(line)
	if len(f) < 6 {
		return 0, false
	}
	ino, err := strconv.ParseUint(f[4], 10, 64)
	return ino, err == nil && ino != 0
}

type inodeSet map[uint64]bool

func (s inodeSet) String() string {
	return fmt.Sprint(slices.Sorted(maps.Keys(s)))
}

// linkInode returns the inode of the file behind a /proc magic link (fd or map_files)
// whose target contains substr.
func linkInode(path, substr string) (uint64, bool) {
	target, err := os.Readlink(path)
	if err != nil || !strings.Contains(target, substr) {
		return 0, false
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Ino, true
}

// dmbInodes returns the inodes of the DMB memfds process pid (0: this one) holds as
// descriptors and those it has mapped.
func dmbInodes(t testing.TB, pid int) (fds, maps inodeSet) {
	t.Helper()
	fds, err := dmbFDInodes(pid)
	require.NoError(t, err)
	maps, err = dmbMapInodes(pid)
	require.NoError(t, err)
	return fds, maps
}

// dmbFDInodes returns the inodes of the DMB memfds process pid holds as descriptors.
func dmbFDInodes(pid int) (inodeSet, error) {
	dir := procDir(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	s := inodeSet{}
	for _, e := range ents {
		if ino, ok := linkInode(filepath.Join(dir, e.Name()), dmbName); ok {
			s[ino] = true
		}
	}
	return s, nil
}

// dmbMapInodes returns the inodes of the DMB memfds process pid has mapped.
func dmbMapInodes(pid int) (inodeSet, error) {
	lines, err := mapsLines(pid, dmbName)
	if err != nil {
		return nil, err
	}
	s := inodeSet{}
	for _, l := range lines {
		ino, ok := mapsInode(l)
		if !ok {
			return nil, fmt.Errorf("no inode in maps line %q", l)
		}
		s[ino] = true
	}
	return s, nil
}

// dmbMapBytes returns how many bytes of each DMB slab (by inode) process pid (0: this
// one) has mapped. Neighbouring DMB mappings of one slab may show as one line.
func dmbMapBytes(t testing.TB, pid int) map[uint64]int64 {
	t.Helper()
	lines, err := mapsLines(pid, dmbName)
	require.NoError(t, err)
	out := map[uint64]int64{}
	for _, l := range lines {
		ino, ok := mapsInode(l)
		var lo, hi uint64
		_, err := fmt.Sscanf(strings.Fields(l)[0], "%x-%x", &lo, &hi)
		require.True(t, ok, "maps line %q: no inode", l)
		require.NoError(t, err, "maps line %q", l)
		out[ino] += int64(hi - lo)
	}
	return out
}

// memfdRef is one reference to a memfd found under /proc.
type memfdRef struct {
	pid  int
	what string // "fd/N", "map_files/RANGE" or "maps: LINE"
	ino  uint64
}

func (r memfdRef) String() string { return fmt.Sprintf("pid %d %s (inode %d)", r.pid, r.what, r.ino) }

// memfdRefs scans every process's descriptors (/proc/*/fd), mapped files
// (/proc/*/map_files) and mappings (/proc/*/maps) for memfds with one of the given
// inodes. Processes that vanish or deny access during the scan are skipped.
func memfdRefs(inodes inodeSet) []memfdRef {
	var refs []memfdRef
	procs, _ := os.ReadDir("/proc")
	for _, pe := range procs {
		pid, err := strconv.Atoi(pe.Name())
		if err != nil {
			continue
		}
		base := filepath.Join("/proc", pe.Name())
		for _, sub := range []string{"fd", "map_files"} {
			ents, err := os.ReadDir(filepath.Join(base, sub))
			if err != nil {
				continue
			}
			for _, e := range ents {
				if ino, ok := linkInode(filepath.Join(base, sub, e.Name()), "memfd:"); ok && inodes[ino] {
					refs = append(refs, memfdRef{pid, sub + "/" + e.Name(), ino})
				}
			}
		}
		b, err := os.ReadFile(filepath.Join(base, "maps"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if !strings.Contains(line, "memfd:") {
				continue
			}
			if ino, ok := mapsInode(line); ok && inodes[ino] {
				refs = append(refs, memfdRef{pid, "maps: " + strings.TrimSpace(line), ino})
			}
		}
	}
	return refs
}

// mapFilesReadable reports whether /proc/<pid>/map_files links can be followed here
// (it takes CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE).
func mapFilesReadable() bool {
	ents, err := os.ReadDir("/proc/self/map_files")
	if err != nil || len(ents) == 0 {
		return false
	}
	_, err = os.Stat("/proc/self/map_files/" + ents[0].Name())
	return err == nil
}

// isTimeout reports whether err is a deadline error by both tests a caller may use:
// errors.Is(err, os.ErrDeadlineExceeded) and net.Error's Timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
}
