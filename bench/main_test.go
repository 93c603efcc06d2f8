package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/smcloop/smcloop/internal/bench"
	"github.com/smcloop/smcloop/internal/bench/command"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain makes the test binary a server child when it is run as the bench server
// subcommand, as this program is.
func TestMain(m *testing.M) {
	registerTransports()
	if len(os.Args) > 1 && os.Args[1] == command.ServerName {
		if err := separateStdout(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := bench.ServeChild(context.Background(), os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestShmipcPoints measures one short ping-pong and one short stream point of each size
// over shmipc and shmipc-zc, server and client in separate processes: every byte
// arrives verified, and the figures and the CPU time are filled in. No stream falls back
// to shmipc-go's unix socket: the credit window keeps the writer within shmipc-go's
// buffers (without it, every stream here did, within a few dozen to a few thousand
// messages; with a window of bytes and writes alone, a 4 MiB zero-copy one did at its
// second message, out of 128 KiB slices).
func TestShmipcPoints(t *testing.T) {
	ts, err := bench.Resolve([]string{"shmipc", "shmipc-zc"})
	require.NoError(t, err)
	tmp := t.TempDir()
	cfg := bench.Config{
		Transports: ts,
		// 200000 and 300000 bytes are larger than shmipc-go's largest buffer slice: the
		// zero-copy writer reserves them in pieces.
		LatSizes: []int{14, 200000},
		BWSizes:  []int{1024, 300000, 4 << 20},
		Duration: 50 * time.Millisecond,
		Warmup:   10 * time.Millisecond,
		Rounds:   1,
		Server: func(args []string) *exec.Cmd {
			cmd := exec.Command(os.Args[0], append([]string{command.ServerName}, args...)...)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "GORACE=atexit_sleep_ms=0")
			return cmd
		},
	}
	res, err := bench.Run(context.Background(), cfg)
	require.NoError(t, err)

	require.Len(t, res.Latency, 2)
	for _, p := range res.Latency {
		require.Len(t, p.Results, 2)
		for i, r := range p.Results {
			assert.Equal(t, ts[i].Name, r.Transport)
			assert.Positive(t, r.Samples, "ping-pong %d %s", p.Size, r.Transport)
			assert.LessOrEqual(t, r.MinNS, r.P50NS)
			require.NotNil(t, r.CPU)
			assert.Equal(t, r.Samples, r.CPU.ClientOps)
			assert.Positive(t, r.CPU.PerOpNS)
		}
	}
	require.Len(t, res.Stream, 3)
	for _, p := range res.Stream {
		require.Len(t, p.Results, 2)
		for i, r := range p.Results {
			assert.Equal(t, ts[i].Name, r.Transport)
			require.Zero(t, r.FellBack, "stream %d %s: %s", p.Size, r.Transport, r.FallbackError)
			assert.Positive(t, r.MessagesSent, "stream %d %s", p.Size, r.Transport)
			assert.Equal(t, r.MessagesSent, r.MessagesReceived)
			assert.Equal(t, r.BytesSent, r.BytesReceived)
			assert.Equal(t, r.MessagesSent*uint64(p.Size), r.BytesReceived)
			assert.Positive(t, r.BytesPerSec)
			require.NotNil(t, r.CPU)
			assert.Positive(t, r.CPU.PerOpNS)
		}
	}
	ents, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, ents, "the servers' unix socket directories are removed")
}

// TestTransportsRegistered checks the program knows smcloop's, the baselines' and
// shmipc-go's transports, and that only the -zc ones have zero-copy buffers.
func TestTransportsRegistered(t *testing.T) {
	assert.Equal(t, []string{"shmipc", "shmipc-zc", "smcd", "smcd-1m", "smcd-1m-nosplit", "smcd-1m-split",
		"smcd-autocork", "smcd-busypoll", "smcd-copy", "smcd-limit", "smcd-nospin", "smcd-slowhs", "smcd-slowhs-limit",
		"smcd-to-tcp", "smcd-zc", "smcr", "tcp", "tcp-clc", "tcp-to-smcd", "unix"},
		bench.Registered())
	for _, name := range bench.Registered() {
		tr, err := bench.Lookup(name)
		require.NoError(t, err)
		assert.Equal(t, name == "shmipc-zc" || name == "smcd-zc", tr.ZeroCopy != nil, name)
	}
}
