package test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/clc"
	"github.com/stretchr/testify/require"
)

// The interop matrix: smcloop and plain net peers, in separate processes, with a
// client-speaks-first protocol (an HTTP exchange) and a server-speaks-first one (an SMTP
// banner). Every case must carry the exact bytes and report the right mode and reasons.

const (
	httpBody = 200 << 10 // crosses the default 64 KiB ring several times
	banner   = "220 smcloop.test ESMTP ready\r\n"
)

// peerInterop runs one side: args are "server KIND PROTO" or "client KIND PROTO ADDR",
// KIND smcloop or plain, PROTO clientfirst or serverfirst. It prints
// "RESULT <smc> <local> <peer>" for an smcloop side, "RESULT plain" for a plain one.
func peerInterop(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("interop: want server|client KIND PROTO [ADDR], got %q", args)
	}
	// A last argument "net=unix:PATH" (server) or "net=unix" (client) selects a unix
	// socket instead of TCP on 127.0.0.1.
	network, laddr := "tcp", "127.0.0.1:0"
	if n, ok := strings.CutPrefix(args[len(args)-1], "net="); ok {
		args = args[:len(args)-1]
		network, laddr, _ = strings.Cut(n, ":")
	}
	side, kind, proto := args[0], args[1], args[2]
	var conn net.Conn
	switch side {
	case "server":
		var ln net.Listener
		var err error
		if kind == "smcloop" {
			ln, err = smcloop.Listen(network, laddr)
		} else {
			ln, err = net.Listen(network, laddr)
		}
		if err != nil {
			return err
		}
		defer ln.Close()
		say("ADDR %s", ln.Addr())
		if conn, err = ln.Accept(); err != nil {
			return err
		}
	case "client":
		if len(args) < 4 {
			return fmt.Errorf("interop: client needs an address")
		}
		var err error
		if kind == "smcloop" {
			conn, err = smcloop.Dial(network, args[3])
		} else {
			conn, err = net.Dial(network, args[3])
		}
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("interop: side %q", side)
	}
	defer conn.Close()
	var err error
	switch side + "/" + proto {
	case "server/clientfirst":
		err = httpServer(conn)
	case "client/clientfirst":
		err = httpClient(conn)
	case "server/serverfirst":
		err = smtpServer(conn)
	case "client/serverfirst":
		err = smtpClient(conn)
	default:
		err = fmt.Errorf("interop: protocol %q", proto)
	}
	if err != nil {
		return err
	}
	if c, ok := conn.(*smcloop.Conn); ok {
		local, peer := c.FallbackReason()
		st := c.Stats()
		say("RESULT %v %#x %#x %d %d", c.UsingSMC(), local, peer, st.TCPBytesSent+st.TCPBytesRecv, st.SMCBytesSent+st.SMCBytesRecv)
	} else {
		say("RESULT plain")
	}
	return nil
}

func body() []byte { return payload(7, httpBody) }

func httpServer(c net.Conn) error {
	r := bufio.NewReader(c)
	var req strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("reading the request: %w", err)
		}
		req.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	if want := "GET /file HTTP/1.1\r\nHost: smcloop.test\r\n\r\n"; req.String() != want {
		return fmt.Errorf("request %q, want %q", req.String(), want)
	}
	b := body()
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	return err
}

func httpClient(c net.Conn) error {
	if _, err := io.WriteString(c, "GET /file HTTP/1.1\r\nHost: smcloop.test\r\n\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	status, err := r.ReadString('\n')
	if err != nil || status != "HTTP/1.1 200 OK\r\n" {
		return fmt.Errorf("status %q, %v", status, err)
	}
	length := -1
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if line == "\r\n" {
			break
		}
		if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	got := make([]byte, length)
	if _, err := io.ReadFull(r, got); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if !bytes.Equal(got, body()) {
		return fmt.Errorf("body of %d bytes differs", len(got))
	}
	return nil
}

func smtpServer(c net.Conn) error {
	if _, err := io.WriteString(c, banner); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "QUIT\r\n" {
		return fmt.Errorf("command %q, %v", line, err)
	}
	_, err = io.WriteString(c, "221 bye\r\n")
	return err
}

func smtpClient(c net.Conn) error {
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || line != banner {
		return fmt.Errorf("banner %q, %v", line, err)
	}
	if _, err := io.WriteString(c, "QUIT\r\n"); err != nil {
		return err
	}
	line, err = r.ReadString('\n')
	if err != nil || line != "221 bye\r\n" {
		return fmt.Errorf("reply %q, %v", line, err)
	}
	return nil
}

func TestInteropMatrix(t *testing.T) { interopMatrix(t, "tcp") }

// TestInteropMatrixUnix is the matrix over unix stream sockets: the CLC exchange and
// liveness on the socket, the bytes in shared memory or, with a plain peer, on the socket.
func TestInteropMatrixUnix(t *testing.T) { interopMatrix(t, "unix") }

func interopMatrix(t *testing.T, network string) {
	type want struct {
		smc         bool
		local, peer uint32
	}
	cases := []struct {
		client, server string
		clientWant     *want // nil for a plain side
		serverWant     *want
	}{
		{"smcloop", "smcloop", &want{smc: true}, &want{smc: true}},
		{"smcloop", "plain", &want{local: clc.DeclPeerNoSMC}, nil},
		{"plain", "smcloop", nil, &want{local: clc.DeclPeerNoSMC}},
	}
	for _, tc := range cases {
		for _, proto := range []string{"clientfirst", "serverfirst"} {
			t.Run(tc.client+"-to-"+tc.server+"/"+proto, func(t *testing.T) {
				args := []string{"server", tc.server, proto}
				if network == "unix" {
					args = append(args, "net=unix:"+filepath.Join(t.TempDir(), "s"))
				}
				srv := startPeer(t, "interop", args...)
				addr := srv.addr()
				cli := startPeer(t, "interop", "client", tc.client, proto, addr, "net="+network)
				check := func(p *peer, w *want) {
					f := strings.Fields(p.expect("RESULT"))
					if w == nil {
						require.Equal(t, []string{"plain"}, f, "%s side", p.role)
						return
					}
					require.Len(t, f, 5, "%s side: %q", p.role, f)
					got := fmt.Sprintf("%s %s %s", f[0], f[1], f[2])
					exp := fmt.Sprintf("%v %#x %#x", w.smc, w.local, w.peer)
					require.Equal(t, exp, got, "%s side reports smc/local/peer", p.role)
					tcpBytes, smcBytes := f[3], f[4]
					if w.smc {
						require.Equal(t, "0", tcpBytes, "%s side: application bytes across TCP on an SMC connection", p.role)
					} else {
						require.Equal(t, "0", smcBytes, "%s side: bytes through SMC on a TCP connection", p.role)
					}
				}
				check(cli, tc.clientWant)
				check(srv, tc.serverWant)
				require.NoError(t, cli.wait(), "client")
				require.NoError(t, srv.wait(), "server")
			})
		}
	}
}
