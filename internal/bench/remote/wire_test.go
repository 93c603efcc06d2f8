package remote

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzReadHello: any bytes from a relay either parse as a hello whose arguments encode
// back to a hello that parses the same, or fail; none panics.
func FuzzReadHello(f *testing.F) {
	good, _ := appendHello(nil, []string{"--transport", "tcp", "--lifeline"})
	f.Add(good)
	f.Add([]byte(Magic + " []\n"))
	f.Add([]byte(Magic + " [1]\n"))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		args, err := readHello(bufio.NewReaderSize(bytes.NewReader(b), MaxHello))
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(args), maxArgs)
		again, err := appendHello(nil, args)
		require.NoError(t, err)
		args2, err := readHello(bufio.NewReaderSize(bytes.NewReader(again), MaxHello))
		require.NoError(t, err)
		require.Equal(t, args, args2)
	})
}

// FuzzReadFrame: any bytes from a host either read as frames of known types within the
// bounds, or fail with a protocol error or a short read; none panics.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, frameStarted, nil), frameExit, []byte{0, 0, 0, 3}))
	f.Add(appendFrame(nil, frameStdout, []byte("LISTEN 10.0.0.1:1\n")))
	f.Add([]byte{frameStderr, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		buf := make([]byte, MaxFrame)
		for {
			typ, p, err := readFrame(r, buf)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrProtocol) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			require.True(t, typ >= frameStarted && typ <= frameExit)
			require.LessOrEqual(t, len(p), MaxFrame)
			if typ == frameExit {
				require.Len(t, p, 4)
			}
		}
	})
}
