package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// DialTimeout bounds the relay's connection to the host.
const DialTimeout = 10 * time.Second

// ErrNoExit is matched by Relay's error when the control connection ended before the
// child's exit status came.
var ErrNoExit = errors.New("remote: the control connection ended without the server's exit status")

// Relay connects to the bench host at addr, has it start a server child with args and
// relays: stdin to the child's stdin (its EOF becomes the child's), the child's stdout
// and stderr to stdout and stderr. It returns the child's exit status once the child
// has exited. The connection and the host's answer are waited for at most DialTimeout
// and 10 s; after that the child's lifetime bounds the relay's, and ctx ending
// closes the connection (which kills the child). Relay may return while a copy of
// stdin is still blocked in stdin's Read; in the relay process, which then exits, that
// does not matter.
func Relay(ctx context.Context, addr string, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	hello, err := appendHello(nil, args)
	if err != nil {
		return 0, err
	}
	d := net.Dialer{Timeout: DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("remote: connecting to the bench host: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetDeadline(time.Now().Add(helloTimeout))
	if _, err := conn.Write(hello); err != nil {
		return 0, fmt.Errorf("remote: sending the hello: %w", err)
	}
	buf := make([]byte, MaxFrame)
	typ, p, err := readFrame(conn, buf)
	switch {
	case err != nil:
		return 0, fmt.Errorf("remote: waiting for the bench host's answer: %w", noEOF(err))
	case typ == frameRefused:
		return 0, &RefusedError{Reason: string(p)}
	case typ != frameStarted:
		return 0, &ProtocolError{"first frame", fmt.Sprint(typ), "started or refused"}
	}
	conn.SetDeadline(time.Time{})

	go func() {
		io.Copy(conn, stdin)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	for {
		typ, p, err := readFrame(conn, buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, ErrNoExit
			}
			if ctx.Err() != nil {
				return 0, context.Cause(ctx)
			}
			return 0, fmt.Errorf("remote: reading the server's output: %w", err)
		}
		switch typ {
		case frameStdout:
			if _, err := stdout.Write(p); err != nil {
				return 0, fmt.Errorf("remote: relaying the server's stdout: %w", err)
			}
		case frameStderr:
			stderr.Write(p) // best effort: stderr only explains
		case frameExit:
			return int(int32(binary.BigEndian.Uint32(p))), nil
		default:
			return 0, &ProtocolError{"frame type after start", fmt.Sprint(typ), "stdout, stderr or exit"}
		}
	}
}
