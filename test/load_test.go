package test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop"
)

// TestLoad10kConns opens 10,000 concurrent SMC-D connections between two peer
// processes (a client and a server, both children, so that what they hold is theirs
// alone), each checked with a round trip of its own 16 bytes, under the machine's
// default descriptor limit. While all are open it reads from /proc what each process
// holds: OS threads (at most GOMAXPROCS+8), descriptors and memory per connection.
// Then the client closes every connection: every Close succeeds, the server sees a
// clean EOF on each, and the descriptors go back.
//
// DMBs: 10,000 connections need 10,000 DMBs in each process, above loopback-ism's limit
// of 5000 (SMC_LO_MAX_DMBS), so both children run with SMCLOOP_MAX_DMBS=10240. With
// -short it runs 500 connections.
func TestLoad10kConns(t *testing.T) {
	conns := 10000
	if testing.Short() {
		conns = 500
	}
	var lim [2]uint64
	if b, err := os.ReadFile("/proc/self/limits"); err == nil {
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); strings.HasPrefix(line, "Max open files") && len(f) >= 5 {
				lim[0], _ = strconv.ParseUint(f[3], 10, 64)
				lim[1], _ = strconv.ParseUint(f[4], 10, 64)
			}
		}
	}
	t.Logf("descriptor limit: soft %d, hard %d (Go raises the soft limit to the hard one)", lim[0], lim[1])
	seed := testSeed(t)
	t.Setenv("SMCLOOP_MAX_DMBS", "10240")
	srv := startPeer(t, "loadserver")
	addr := srv.addr()
	srvBase := procUsage(t, srv.pid())
	cli := startPeer(t, "loadclient", addr, strconv.Itoa(conns), strconv.FormatUint(seed, 10))
	cliBase := procUsage(t, cli.pid())

	start := time.Now()
	up := cli.expect("UP")
	took := time.Since(start)
	require.Equal(t, strconv.Itoa(conns), up, "the client's report")
	srv.send("count")
	require.Equal(t, strconv.Itoa(conns), srv.expect("COUNT"), "connections the server holds")
	t.Logf("%d SMC-D connections up and echoed in %v (%.0f/s)", conns, took.Round(time.Millisecond), float64(conns)/took.Seconds())

	start = time.Now()
	cli.send("talk")
	require.Equal(t, strconv.Itoa(conns), cli.expect("TALKED"))
	t.Logf("%d more round trips of 16 bytes on each in %v", loadRounds-1, time.Since(start).Round(time.Millisecond))

	// Shared memory: what the DMB memfds of both processes hold allocated (their
	// blocks), and what the two processes touched (their proportional shares of shared
	// pages, which add up to the pages either touched).
	alloc := dmbAllocated(t, cli.pid(), srv.pid())
	touched := pssShmem(t, cli.pid()) + pssShmem(t, srv.pid())
	t.Logf("shared memory after %d messages each way on each connection: %.1f KiB allocated, %.1f KiB touched per connection",
		loadRounds, float64(alloc)/1024/float64(conns), float64(touched)/1024/float64(conns))
	assert.LessOrEqual(t, alloc, int64(conns)*160<<10, "DMB memory allocated for %d connections", conns)
	assert.LessOrEqual(t, touched, int64(conns)*160<<10, "DMB memory touched for %d connections", conns)

	cliUp, srvUp := procUsage(t, cli.pid()), procUsage(t, srv.pid())
	maxThreads := runtime.GOMAXPROCS(0) + 8 // the children inherit the machine's CPUs
	for _, p := range []struct {
		name     string
		base, up usage
	}{{"client", cliBase, cliUp}, {"server", srvBase, srvUp}} {
		t.Logf("%s: %d threads; %d fds (%.3f per connection); RSS %d MiB (%.1f KiB per connection: %.1f anon, %.1f shared)",
			p.name, p.up.threads, p.up.fds, float64(p.up.fds-p.base.fds)/float64(conns),
			p.up.rssKB>>10, float64(p.up.rssKB-p.base.rssKB)/float64(conns),
			float64(p.up.anonKB-p.base.anonKB)/float64(conns), float64(p.up.shmemKB-p.base.shmemKB)/float64(conns))
		assert.LessOrEqual(t, p.up.threads, maxThreads, "%s OS threads with %d connections open", p.name, conns)
		assert.Less(t, p.up.fds-p.base.fds, conns+conns/16, "%s descriptors for %d connections", p.name, conns)
	}

	cli.send("close")
	cli.expect("CLOSED") // every Close of the client succeeded
	srv.send("wait %d", conns)
	require.Equal(t, strconv.Itoa(conns), srv.expect("EOFS"), "clean ends seen by the server")
	cliEnd, srvEnd := procUsage(t, cli.pid()), procUsage(t, srv.pid())
	t.Logf("after close: client %d fds, server %d fds", cliEnd.fds, srvEnd.fds)
	// What stays is the link group's cache of idle DMBs (a slab descriptor per 64 of
	// them) until its sweep; no connection's socket.
	assert.Less(t, cliEnd.fds-cliBase.fds, conns/32+16, "client descriptors after closing everything")
	assert.Less(t, srvEnd.fds-srvBase.fds, conns/32+16, "server descriptors after closing everything")
	cli.exit()
	srv.exit()
}

// usage is what a process holds, from /proc.
type usage struct {
	threads, fds           int
	rssKB, anonKB, shmemKB int
}

func procUsage(t *testing.T, pid int) usage {
	t.Helper()
	var u usage
	b, err := os.ReadFile(procDir(pid) + "/status")
	require.NoError(t, err)
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "Threads:":
			u.threads = v
		case "VmRSS:":
			u.rssKB = v
		case "RssAnon:":
			u.anonKB = v
		case "RssShmem:":
			u.shmemKB = v
		}
	}
	u.fds, err = countFDs(pid)
	require.NoError(t, err)
	return u
}

// loadRounds is how many 16-byte round trips each connection makes: one as it comes
// up, the rest on "talk".
const loadRounds = 100

// loadPayload is connection i's 16 bytes in round r.
func loadPayload(seed uint64, i, r int) []byte {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], seed^uint64(r))
	binary.LittleEndian.PutUint64(b[8:], uint64(i)*0x9e3779b97f4a7c15)
	return b[:]
}

// roundTrip sends connection i's payload of round r and checks its echo.
func roundTrip(c *smcloop.Conn, seed uint64, i, r int) error {
	want := loadPayload(seed, i, r)
	got := make([]byte, len(want))
	if _, err := c.Write(want); err != nil {
		return fmt.Errorf("conn %d round %d: Write: %w", i, r, err)
	}
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
		return fmt.Errorf("conn %d round %d: echo %x, %v; want %x", i, r, got, err, want)
	}
	return nil
}

// peerLoadServer accepts SMC-D connections, echoes each one's first 16 bytes and then
// waits for its end. Commands: "count" (COUNT <connections accepted>), "wait <n>"
// (EOFS <n> once n connections ended with a clean EOF, or ERR), "exit".
func peerLoadServer() error {
	ln, err := peerListen()
	if err != nil {
		return err
	}
	var accepted, eofs atomic.Int64
	var mu sync.Mutex
	var firstErr error
	ended := make(chan struct{}, 1)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		select {
		case ended <- struct{}{}:
		default:
		}
	}
	go func() {
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(peerWatchdog))
				var b [16]byte
				for i := 0; ; i++ {
					if _, err := io.ReadFull(c, b[:]); err != nil {
						if i == loadRounds && errors.Is(err, io.EOF) {
							break
						}
						fail(fmt.Errorf("reading payload %d: %w", i, err))
						return
					}
					if _, err := c.Write(b[:]); err != nil {
						fail(fmt.Errorf("echoing: %w", err))
						return
					}
				}
				eofs.Add(1)
				select {
				case ended <- struct{}{}:
				default:
				}
			}()
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 1 && f[0] == "count":
			say("COUNT %d", accepted.Load())
		case len(f) == 2 && f[0] == "wait":
			n, _ := strconv.ParseInt(f[1], 10, 64)
			for {
				mu.Lock()
				err := firstErr
				mu.Unlock()
				if err != nil {
					say("ERR wait: %v", err)
					break
				}
				if eofs.Load() >= n {
					say("EOFS %d", eofs.Load())
					break
				}
				<-ended
			}
		case len(f) == 1 && f[0] == "exit":
			ln.Close()
			return nil
		}
	}
	ln.Close()
	return nil
}

// peerLoadClient dials n SMC-D connections to addr with a few dialers at a time and
// checks each with a round trip of its own 16 bytes, then says "UP n". On "close" it
// closes every connection and says CLOSED (or ERR with the first failure).
func peerLoadClient(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("want <addr> <conns> <seed>, got %q", args)
	}
	addr := args[0]
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	seed, err := strconv.ParseUint(args[2], 10, 64)
	if err != nil {
		return err
	}
	cs := make([]*smcloop.Conn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				c, err := smcloop.Dial("tcp", addr)
				if err != nil {
					errs <- fmt.Errorf("conn %d: Dial: %w", i, err)
					return
				}
				cs[i] = c
				if !c.UsingSMC() {
					errs <- fmt.Errorf("conn %d is not SMC-D: %s", i, c.Mode())
					return
				}
				c.SetDeadline(time.Now().Add(peerWatchdog))
				if err := roundTrip(c, seed, i, 0); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		say("ERR dial: %v", err)
		return err
	default:
	}
	say("UP %d", n)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "talk":
			// The other rounds, every connection at once, a worker per 64.
			var next atomic.Int64
			var wg sync.WaitGroup
			for range max(1, n/64) {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= n {
							return
						}
						for r := 1; r < loadRounds; r++ {
							if err := roundTrip(cs[i], seed, i, r); err != nil {
								select {
								case errs <- err:
								default:
								}
								return
							}
						}
					}
				})
			}
			wg.Wait()
			select {
			case err := <-errs:
				say("ERR talk: %v", err)
				return err
			default:
			}
			say("TALKED %d", n)
		case "close":
			var first error
			for i, c := range cs {
				if err := c.Close(); err != nil && first == nil {
					first = fmt.Errorf("conn %d: Close: %w", i, err)
				}
			}
			if first != nil {
				say("ERR close: %v", first)
				return first
			}
			say("CLOSED")
		case "exit":
			return nil
		}
	}
	return nil
}

// dmbAllocated is the memory allocated to the DMB memfds that processes pids hold
// descriptors for: their blocks, from /proc/PID/fd, each memfd counted once. A slab's
// owner holds its memfd for the slab's life; an attacher holds its peer's for a moment,
// between the attach reply and its mmap, so a process measured just after a handshake
// may show its peer's slab too: counting each inode once (and, in the caller, leaving
// out the slabs a process owns) keeps that from counting twice or as the wrong side's.
func dmbAllocated(t *testing.T, pids ...int) int64 {
	t.Helper()
	return dmbAllocatedExcept(t, nil, pids...)
}

// dmbAllocatedExcept is dmbAllocated without the memfds in except.
func dmbAllocatedExcept(t *testing.T, except inodeSet, pids ...int) int64 {
	t.Helper()
	seen := inodeSet{}
	var total int64
	for _, pid := range pids {
		dir := procDir(pid) + "/fd"
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range ents {
			path := dir + "/" + e.Name()
			if target, err := os.Readlink(path); err != nil || !strings.Contains(target, dmbName) {
				continue
			}
			fi, err := os.Stat(path)
			if err != nil {
				continue
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok || seen[st.Ino] || except[st.Ino] {
				continue
			}
			seen[st.Ino] = true
			total += st.Blocks * 512
		}
	}
	return total
}

// pssShmem is process pid's proportional share of the shared memory pages it has
// mapped and touched (Pss_Shmem of /proc/PID/smaps_rollup), in bytes.
func pssShmem(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(procDir(pid) + "/smaps_rollup")
	require.NoError(t, err)
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss_Shmem:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no Pss_Shmem in smaps_rollup")
	return 0
}
