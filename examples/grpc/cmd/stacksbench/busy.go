package main

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/smcloop/smcloop/examples/grpc/internal/child"
)

// keepBusy is a busy neighbour's life (-busy-child): it keeps one thread busy until its
// standard input, which the parent holds, closes.
func keepBusy() {
	var stop atomic.Bool
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop.Store(true)
	}()
	child.Ready("busy")
	for !stop.Load() {
	}
}

// startBusy starts n busy neighbours; closing each ends it.
func startBusy(n int) ([]*child.Process, error) {
	var ps []*child.Process
	for range n {
		p, err := child.Start(nil, "-busy-child")
		if err != nil {
			for _, q := range ps {
				q.Close()
			}
			return nil, fmt.Errorf("starting a busy neighbour: %w", err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}
