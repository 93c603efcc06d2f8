package remote

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The control connection, relay to host:
//
//	hello line: Magic, a space, the child's arguments as a JSON array of strings, "\n"
//	            (at most MaxHello bytes)
//	then the bytes of the child's stdin; the relay's half-close is the stdin's EOF
//
// Host to relay, frames: a type byte, a big-endian uint32 length, that many bytes (at
// most MaxFrame):
//
//	frameStarted  (empty)      the child runs; its output follows
//	frameRefused  a message    the hello was refused; the host closes the connection
//	frameStdout   bytes        the child's stdout
//	frameStderr   bytes        the child's stderr
//	frameExit     4 bytes      the child's exit status (int32); the last frame
const (
	// Magic opens the hello line and names the protocol's version.
	Magic = "SMCLOOP-BENCH-HOST/1"
	// MaxHello bounds the hello line.
	MaxHello = 16 << 10
	// MaxFrame bounds a frame's payload.
	MaxFrame = 32 << 10
	// maxArgs bounds the number of arguments in a hello.
	maxArgs = 64
)

// Frame types.
const (
	frameStarted byte = 1 + iota
	frameRefused
	frameStdout
	frameStderr
	frameExit
)

const frameHeaderLen = 5

// ErrProtocol is matched (errors.Is) by the errors of a peer that breaks the protocol.
var ErrProtocol = errors.New("remote: protocol violation")

// ProtocolError is a control message that does not follow the protocol: which field,
// what was got and what was wanted.
type ProtocolError struct {
	Field string
	Got   string
	Want  string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("remote: %s: got %s, want %s", e.Field, e.Got, e.Want)
}

// Is makes every ProtocolError match ErrProtocol.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// RefusedError is the host's refusal of a hello.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "remote: the bench host refused: " + e.Reason }

// appendHello appends the hello line for args.
func appendHello(b []byte, args []string) ([]byte, error) {
	js, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	b = append(append(append(b, Magic...), ' '), js...)
	b = append(b, '\n')
	if len(b) > MaxHello {
		return nil, fmt.Errorf("remote: %d bytes of arguments: the hello is limited to %d", len(js), MaxHello)
	}
	return b, nil
}

// readHello reads and parses the hello line from r, whose buffer must hold MaxHello
// bytes.
func readHello(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, &ProtocolError{"hello", fmt.Sprintf("more than %d bytes without a newline", r.Size()), "one line"}
	case err != nil:
		return nil, fmt.Errorf("remote: reading the hello: %w", err)
	}
	rest, ok := strings.CutPrefix(string(line[:len(line)-1]), Magic+" ")
	if !ok {
		return nil, &ProtocolError{"hello", fmt.Sprintf("%.40q", line), Magic + " and the arguments"}
	}
	var args []string
	if err := json.Unmarshal([]byte(rest), &args); err != nil {
		return nil, &ProtocolError{"hello arguments", fmt.Sprintf("%.40q", rest), "a JSON array of strings"}
	}
	if len(args) > maxArgs {
		return nil, &ProtocolError{"hello arguments", fmt.Sprint(len(args)), fmt.Sprintf("at most %d", maxArgs)}
	}
	return args, nil
}

// appendFrame appends a frame of type typ with payload p (at most MaxFrame bytes).
func appendFrame(b []byte, typ byte, p []byte) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// readFrame reads one frame into buf (MaxFrame bytes at least) and checks its type and
// length.
func readFrame(r io.Reader, buf []byte) (typ byte, p []byte, err error) {
	var h [frameHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	typ, n := h[0], binary.BigEndian.Uint32(h[1:])
	if typ < frameStarted || typ > frameExit {
		return 0, nil, &ProtocolError{"frame type", fmt.Sprint(typ), fmt.Sprintf("%d..%d", frameStarted, frameExit)}
	}
	if n > MaxFrame {
		return 0, nil, &ProtocolError{"frame length", fmt.Sprint(n), fmt.Sprintf("at most %d", MaxFrame)}
	}
	switch {
	case typ == frameStarted && n != 0:
		return 0, nil, &ProtocolError{"started frame length", fmt.Sprint(n), "0"}
	case typ == frameExit && n != 4:
		return 0, nil, &ProtocolError{"exit frame length", fmt.Sprint(n), "4"}
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return 0, nil, fmt.Errorf("remote: a frame's %d bytes: %w", n, noEOF(err))
	}
	return typ, buf[:n], nil
}

// noEOF turns an EOF in the middle of something into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
