// Package backoff is the accept loops' retry after a transient error (EMFILE, ENFILE,
// ENOBUFS, ECONNABORTED...), as net/http's Server.Serve does it: 5ms, doubling to 1s,
// back to the start after a success.
package backoff

import "time"

const (
	// Min is the first delay.
	Min = 5 * time.Millisecond
	// Max is the longest delay.
	Max = time.Second
)

// Backoff is the delay state of one loop. The zero value starts at Min.
type Backoff struct{ d time.Duration }

// Reset starts the next Wait at Min again; call it after a success.
func (b *Backoff) Reset() { b.d = 0 }

// Wait sleeps for the next delay and reports true, or returns false as soon as done is
// closed.
func (b *Backoff) Wait(done <-chan struct{}) bool {
	b.d = min(max(2*b.d, Min), Max)
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
