package test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/shm"
	"github.com/stretchr/testify/require"
)

// fdSlack is what the Go runtime may open on its own between two counts.
const fdSlack = 2

// resources are what one process holds that a connection may leak.
type resources struct {
	fds, dmbMaps, dmbFDs int
}

func measure(t *testing.T, pid int) resources {
	t.Helper()
	var r resources
	var err error
	if pid == 0 {
		r.fds, err = shm.OpenFDs()
		if err == nil {
			r.dmbMaps, err = shm.CountMappings(dmbName)
		}
	} else {
		r.fds, err = countFDs(pid)
		if err == nil {
			r.dmbMaps, err = countDMBMappings(pid)
		}
	}
	if err == nil {
		var s inodeSet
		s, err = dmbFDInodes(pid)
		r.dmbFDs = len(s)
	}
	require.NoError(t, err, "measuring process %d", pid)
	return r
}

// settleTimeout bounds how long released descriptors, mappings and memory may take to
// disappear after the processes involved are done with a connection or have exited. It
// is a watchdog for asynchronous teardown, generous for a loaded machine.
const settleTimeout = 10 * time.Second

// flat reports whether now holds no more than base: DMB mappings and memfds exactly,
// descriptors up to fdSlack.
func flat(base, now resources) bool {
	return now.dmbMaps <= base.dmbMaps && now.dmbFDs <= base.dmbFDs && now.fds <= base.fds+fdSlack
}

// checkFlat requires process pid (0 for this one) to come back to its baseline within
// settleTimeout.
func checkFlat(t *testing.T, who string, pid int, base resources, after string) {
	t.Helper()
	end := time.Now().Add(settleTimeout)
	for {
		now := measure(t, pid)
		if flat(base, now) {
			return
		}
		if time.Now().After(end) {
			t.Errorf("%s after %s: %d fds (%d DMB memfds), %d DMB mappings; baseline %d fds (%d DMB memfds), %d DMB mappings (fd slack %d)",
				who, after, now.fds, now.dmbFDs, now.dmbMaps, base.fds, base.dmbFDs, base.dmbMaps, fdSlack)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitNoRefs requires that no process references a memfd with one of the inodes within
// settleTimeout.
func waitNoRefs(t *testing.T, inodes inodeSet) {
	t.Helper()
	end := time.Now().Add(settleTimeout)
	for {
		refs := memfdRefs(inodes)
		if len(refs) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Errorf("DMB memory survives its connection and peer process (%v later): %v", settleTimeout, refs)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// echoOnce runs one short connection to the echo peer and waits for the peer to report
// it closed, so that both processes are done with it when it returns.
func echoOnce(t *testing.T, p *peer, addr string, data []byte) {
	t.Helper()
	c, err := smcloop.Dial("tcp", addr)
	require.NoError(t, err, "Dial")
	defer c.Close()
	require.True(t, c.UsingSMC(), "not on SMC: %s", c.Mode())
	c.SetDeadline(time.Now().Add(watchdog))
	got, err := echoRoundTrip(c, data, rand.New(rand.NewPCG(uint64(len(data)), 0)))
	require.NoError(t, err)
	require.Equal(t, -1, firstDiff(got, data), "first byte where the echo differs (got %d bytes, want %d)", len(got), len(data))
	require.NoError(t, c.Close(), "Close")
	var r echoReport
	p.expectJSON("ECHO", &r)
	require.NoError(t, checkEcho(r, len(data)))
}

func TestNoLeaks(t *testing.T) {
	seed := testSeed(t)

	// 200 connections one after the other between the same two processes: after each
	// has closed on both sides, neither process holds more than after the first.
	t.Run("a_200_sequential_conns", func(t *testing.T) {
		const conns = 200
		p := startPeer(t, "echo")
		addr := p.addr()
		var ourBase, peerBase resources
		for i := range conns {
			echoOnce(t, p, addr, payload(seed+uint64(i), 1+i*97))
			switch {
			case i == 0:
				// The first connection set up what may live as long as the two processes
				// (the ISM device sockets between them, buffers kept for reuse); from
				// here on nothing may grow.
				ourBase, peerBase = measure(t, 0), measure(t, p.pid())
				t.Logf("baseline after one connection: parent %+v, peer %+v", ourBase, peerBase)
			case (i+1)%50 == 0:
				after := fmt.Sprintf("%d connections", i+1)
				checkFlat(t, "parent", 0, ourBase, after)
				checkFlat(t, "peer", p.pid(), peerBase, after)
				if t.Failed() {
					t.FailNow()
				}
			}
		}
		p.exit()
	})

	// While the connection is up, record the inodes of both DMB memfds as each process
	// sees them, and check that a scan of /proc finds them in both. After the peer is
	// gone and our side is closed, the scan must find them nowhere: no DMB memory
	// survives its connection.
	memoryGone := func(t *testing.T, kill bool) {
		p, c, _ := scriptConn(t)
		pid := p.pid()
		data := payload(seed, 5000)
		p.send("read %d", len(data))
		_, err := c.Write(data)
		require.NoError(t, err)
		p.reply("read")
		p.send("write %d %d", len(data), seed+1)
		wantBytes(t, "child→parent", readFull(t, c, len(data)), payload(seed+1, len(data)))
		p.reply("write")

		peerFDs, peerMaps := dmbInodes(t, pid)
		ourFDs, ourMaps := dmbInodes(t, 0)
		// The peer owns one DMB (a memfd it holds open) and maps it and ours.
		require.Len(t, peerFDs, 1, "DMB memfds the peer holds")
		require.Len(t, peerMaps, 2, "DMBs the peer maps")
		dmbs := inodeSet{}
		var peerDMB, ourDMB uint64
		for ino := range peerMaps {
			dmbs[ino] = true
			if peerFDs[ino] {
				peerDMB = ino
			} else {
				ourDMB = ino
			}
		}
		require.NotZero(t, peerDMB, "the peer's DMB inode")
		require.NotZero(t, ourDMB, "our DMB inode")
		require.True(t, ourFDs[ourDMB] && ourMaps[ourDMB] && ourMaps[peerDMB] && !ourFDs[peerDMB],
			"DMB inodes: peer's %d, ours %d; we must hold a memfd of ours only and map both, we hold memfds %v and map %v",
			peerDMB, ourDMB, ourFDs, ourMaps)
		t.Logf("peer's DMB is inode %d, ours %d", peerDMB, ourDMB)

		// The scan must see what is there, or its silence later proves nothing.
		type ref struct {
			pid  int
			kind string
			ino  uint64
		}
		// Each process holds its own DMB's memfd and maps both DMBs.
		expect := []ref{{pid, "fd/", peerDMB}, {os.Getpid(), "fd/", ourDMB}}
		kinds := []string{"maps"}
		if mapFilesReadable() {
			kinds = append(kinds, "map_files/")
		}
		for _, kind := range kinds {
			for _, who := range []int{pid, os.Getpid()} {
				expect = append(expect, ref{who, kind, peerDMB}, ref{who, kind, ourDMB})
			}
		}
		refs := memfdRefs(dmbs)
		for _, want := range expect {
			found := false
			for _, r := range refs {
				found = found || r.pid == want.pid && r.ino == want.ino && strings.HasPrefix(r.what, want.kind)
			}
			require.True(t, found, "scan of /proc missed %s of inode %d in pid %d; found %v", want.kind, want.ino, want.pid, refs)
		}

		if kill {
			p.kill()
			require.Error(t, p.wait(), "killed peer exited cleanly")
		} else {
			p.do("close")
			wantEOF(t, c)
			p.exit()
		}
		require.NoError(t, c.Close(), "Close")
		waitNoRefs(t, dmbs)
	}
	t.Run("b_peer_exits_cleanly", func(t *testing.T) { memoryGone(t, false) })
	t.Run("c_peer_sigkilled", func(t *testing.T) { memoryGone(t, true) })

	// Peer processes come and go: once a peer has exited and its connections are
	// closed, this process holds nothing for it.
	t.Run("d_peer_processes_come_and_go", func(t *testing.T) {
		// Open the process's ISM device first: it lives as long as the process.
		ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ln.Close()
		base := measure(t, 0)
		t.Logf("baseline: %+v", base)
		const peers = 5
		for i := range peers {
			p := startPeer(t, "echo")
			echoOnce(t, p, p.addr(), payload(seed+uint64(i), 1000))
			p.exit()
			checkFlat(t, "parent", 0, base, fmt.Sprintf("%d peer processes came and went", i+1))
			if t.Failed() {
				t.FailNow()
			}
		}
	})
}
