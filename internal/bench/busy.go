package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
)

// maxBusy bounds Config.Busy.
const maxBusy = 64

// busyArgs are a busy neighbour's arguments for the server command.
var busyArgs = []string{"--busy", "--lifeline"}

// busyChild is the life of a busy neighbour (a server child with --busy): it announces
// itself as a server does ("LISTEN busy") and keeps one thread busy until its stdin, the
// lifeline, reaches EOF.
func busyChild(stdin io.Reader, stdout io.Writer) error {
	var stop atomic.Bool
	go func() {
		io.Copy(io.Discard, stdin)
		stop.Store(true)
	}()
	if _, err := fmt.Fprintln(stdout, "LISTEN busy"); err != nil {
		return err
	}
	var n uint64
	for !stop.Load() {
		n++
	}
	_, err := fmt.Fprintf(stdout, "BUSY %d\n", n)
	return err
}

// busyGroup is the busy neighbours of a run.
type busyGroup struct {
	kids []*child
}

// startBusy starts n busy neighbours with mk.
func startBusy(ctx context.Context, mk ServerCmd, n int) (*busyGroup, error) {
	g := &busyGroup{}
	for range n {
		c, err := startChild(ctx, mk, busyArgs)
		if err != nil {
			g.stop(ctx)
			return nil, fmt.Errorf("starting a busy neighbour: %w", err)
		}
		g.kids = append(g.kids, c)
	}
	return g, nil
}

// stop ends the neighbours' lifelines and waits for them to exit (killing one that does
// not within childExitTimeout); it returns the first failure one reported.
func (g *busyGroup) stop(ctx context.Context) error {
	for _, c := range g.kids {
		c.stdin.Close()
	}
	var first error
	for _, c := range g.kids {
		if err := c.finish(context.WithoutCancel(ctx)); err != nil && first == nil {
			first = err
		}
	}
	return first
}
