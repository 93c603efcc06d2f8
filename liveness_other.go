//go:build !linux

package smcloop

import "errors"

// watcher is the process's liveness watcher where there is no epoll: it watches nothing,
// so every connection that needs a watch gets a monitor goroutine.
type watcher struct {
	work groupWork // link group terminations that may wait for a peer's device
}

var liveness watcher

var errNoWatcher = errors.New("smcloop: no liveness watcher on this OS")

// add refuses: the caller starts a monitor instead.
func (w *watcher) add(c *Conn) error { return errNoWatcher }

// release has nothing to free.
func (w *watcher) release(i, gen uint32) {}

// watching returns how many connections are watched now: none.
func (w *watcher) watching() int { return 0 }
