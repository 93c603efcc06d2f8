package smcloop

import (
	"fmt"
	"net"
)

// errNilConn is what the methods of a nil *Conn report. Dial and Accept return a nil
// *Conn with their error; held in a net.Conn that is a non-nil interface, so every method
// is safe to call on it and fails as on a closed connection.
var errNilConn = fmt.Errorf("smcloop: nil *Conn (the result of a failed Dial or Accept): %w", net.ErrClosed)

// nilConnError is a nil *Conn's error. It names no network (OpError.Net is empty): a
// nil *Conn was dialed on none.
func nilConnError(op string) error { return &net.OpError{Op: op, Err: errNilConn} }
