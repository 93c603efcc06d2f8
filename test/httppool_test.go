package test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop"
)

// http.Transport pools connections: a request that finds no idle connection dials and
// takes whichever comes first, the new connection or one that turns idle meanwhile; the
// request that freed the latter then dials in turn. A dial that takes longer than a
// request therefore makes the pool open connections it does not need. These tests
// count the connections a net/http server in another process accepts under the same
// load, through smcloop.DialContext and through net's dialer.

const (
	poolWorkers  = 8   // concurrent requests
	poolRequests = 100 // per worker
	poolBody     = 1000
)

// peerHTTPCount serves net/http on a listener of kind smcloop (args[0]) or plain, and
// answers each "count" line with "ACCEPTED <n>": the connections accepted so far.
func peerHTTPCount(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("httpcount: want smcloop|plain, got %q", args)
	}
	var ln net.Listener
	var err error
	if args[0] == "smcloop" {
		ln, err = smcloop.Listen("tcp", "127.0.0.1:0")
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return err
	}
	cl := &countingListener{Listener: ln}
	body := bytes.Repeat([]byte("b"), poolBody)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})}
	go srv.Serve(cl)
	defer srv.Close()
	say("ADDR %s", ln.Addr())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "count" {
			say("ACCEPTED %d", cl.n.Load())
		}
	}
	return nil
}

type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// poolConnections runs the load against a fresh server of kind with a fresh Transport
// and returns the connections the server accepted.
func poolConnections(t *testing.T, kind string, maxIdle int) int {
	t.Helper()
	srv := startPeer(t, "httpcount", kind)
	addr := srv.addr()
	tr := &http.Transport{MaxIdleConnsPerHost: maxIdle}
	if kind == "smcloop" {
		tr.DialContext = smcloop.DialContext
	} else {
		tr.DialContext = (&net.Dialer{}).DialContext
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	errs := make(chan error, poolWorkers)
	var wg sync.WaitGroup
	for range poolWorkers {
		wg.Go(func() {
			for range poolRequests {
				resp, err := client.Get("http://" + addr + "/")
				if err != nil {
					errs <- err
					return
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != poolBody {
					errs <- fmt.Errorf("body of %d bytes, %v", n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	srv.send("count")
	n, err := strconv.Atoi(srv.expect("ACCEPTED"))
	require.NoError(t, err)
	return n
}

// TestHTTPTransportConnections: with smcloop.DialContext, http.Transport opens as many
// connections as with TCP under the same load, with room in the pool for every
// worker's connection (TCP then opens one per worker): DialContext returns once the TCP
// connection is up and the handshake runs in the background, so a dial takes TCP's time
// and the pool has no reason to dial again meanwhile. Three rounds each, summed; smcloop
// may open a quarter more than TCP: a request that comes as another's connection is on its
// way back to the pool dials with either transport (TCP's pool opened 8–9 a round here,
// smcloop's once 25 in three rounds against TCP's 24), while a dial that waited for the
// handshake opened 2–3 times as many as TCP. (With fewer idle
// connections allowed than workers, net/http's default of 2, the pool closes and redials
// connections for either transport, as often as scheduling has it.)
func TestHTTPTransportConnections(t *testing.T) {
	var tcp, smc []int
	for range 3 {
		tcp = append(tcp, poolConnections(t, "plain", poolWorkers))
		smc = append(smc, poolConnections(t, "smcloop", poolWorkers))
	}
	t.Logf("connections accepted per round: tcp %v, smcloop %v", tcp, smc)
	tcpSum, smcSum := tcp[0]+tcp[1]+tcp[2], smc[0]+smc[1]+smc[2]
	require.LessOrEqual(t, smcSum, tcpSum+tcpSum/4,
		"smcloop's pool opened more connections than TCP's beyond the race every pool has")
}

// TestDialContextBackgroundHandshake: DialContext's connection is SMC-D once its
// handshake is done, which its first call waits for; the listener counts it as SMC.
func TestDialContextBackgroundHandshake(t *testing.T) {
	e := startEchoListener(t)
	c, err := smcloop.DialContext(context.Background(), "tcp", e.ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	sc := c.(*smcloop.Conn)
	require.Equal(t, "SMCD", sc.Mode())
	msg := []byte("ping through shared memory")
	_, err = c.Write(msg)
	require.NoError(t, err)
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	st := sc.Stats()
	require.Equal(t, uint64(0), st.TCPBytesSent+st.TCPBytesRecv)
	require.Equal(t, uint64(2*len(msg)), st.SMCBytesSent+st.SMCBytesRecv)
}
