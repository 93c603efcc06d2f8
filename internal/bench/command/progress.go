package command

import (
	"fmt"
	"io"
	"os"
	"time"
)

// Progress keeps one status line up to date on a terminal: which point, transport and
// round is running, and about how long is left. Written anywhere else (a pipe, a file),
// it stays silent, so that piped output holds nothing but the results.
type Progress struct {
	tty     io.Writer // nil: silent
	perStep time.Duration
}

// NewProgress returns a Progress that writes to w if w is a terminal. perStep is the
// expected time of one step, 0 if unknown.
func NewProgress(w io.Writer, perStep time.Duration) *Progress {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return &Progress{}
	}
	return &Progress{tty: f, perStep: perStep}
}

// Show replaces the status line with step of steps, doing what.
func (p *Progress) Show(step, steps int, what string) {
	if p.tty == nil {
		return
	}
	if p.perStep <= 0 {
		fmt.Fprintf(p.tty, "\r\033[K[%d/%d] %s", step, steps, what)
		return
	}
	left := time.Duration(steps-step+1) * p.perStep
	fmt.Fprintf(p.tty, "\r\033[K[%d/%d] %s (about %v left)", step, steps, what, left.Round(time.Second))
}

// Clear erases the status line.
func (p *Progress) Clear() {
	if p.tty != nil {
		fmt.Fprint(p.tty, "\r\033[K")
	}
}
