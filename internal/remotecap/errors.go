package remotecap

import "errors"

// Errors. Each failure the dialer sees means "plain TCP for this connection"; none is
// passed to the user of a connection.
var (
	// ErrMalformed matches every datagram Parse refuses (*WireError).
	ErrMalformed = errors.New("remotecap: malformed datagram")
	// ErrNoAnswer is a probe or an announcement whose answer did not come in time.
	ErrNoAnswer = errors.New("remotecap: no answer in time")
	// ErrRefused is an announcement the listener did not record (*RefusedError).
	ErrRefused = errors.New("remotecap: announcement refused")
	// ErrNotSMC is a destination that answered a probe with ICMP port unreachable: no
	// UDP socket on its port, so no smcloop listener.
	ErrNotSMC = errors.New("remotecap: destination is not an smcloop listener")
)

// RefusedError is an Ack whose status is not StatusOK.
type RefusedError struct{ Status Status }

func (e *RefusedError) Error() string { return "remotecap: announcement refused: " + e.Status.String() }

// Is makes every RefusedError match ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }
