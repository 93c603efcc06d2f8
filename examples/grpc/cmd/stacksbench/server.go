package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/examples/grpc/bulk"
	"github.com/smcloop/smcloop/examples/grpc/internal/child"
	"github.com/smcloop/smcloop/examples/grpc/smccreds"
	"github.com/smcloop/smcloop/internal/cpupin"
)

// serverStats is what the child tells the parent on "stats": the connections its
// servers accepted so far, by mode as gRPC's AuthInfo (or, for HTTP, the accepted
// connection) says, with their smcloop counters added up.
type serverStats struct {
	GRPCModes map[string]int `json:"grpc_modes"`
	HTTPModes map[string]int `json:"http_modes"`
	SMC       counters       `json:"smc"`
	// The child's smcloop.ProcessStatistics: handshakes that ended in SMC-D, fell
	// back or failed.
	ServerSMC      uint64            `json:"server_smc"`
	ServerFallback uint64            `json:"server_fallback"`
	ServerHSErr    uint64            `json:"server_handshake_errors"`
	Reasons        map[string]uint64 `json:"server_fallback_reasons"`
}

type server struct {
	mu        sync.Mutex
	conns     []net.Conn
	grpcModes map[string]int
	httpModes map[string]int
}

func (s *server) add(c net.Conn, modes map[string]int, mode string) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	modes[mode]++
	s.mu.Unlock()
}

func (s *server) stats() serverStats {
	s.mu.Lock()
	st := serverStats{GRPCModes: map[string]int{}, HTTPModes: map[string]int{}, SMC: sumCounters(s.conns)}
	for m, n := range s.grpcModes {
		st.GRPCModes[m] = n
	}
	for m, n := range s.httpModes {
		st.HTTPModes[m] = n
	}
	s.mu.Unlock()
	ps := smcloop.ProcessStatistics()
	st.ServerSMC, st.ServerFallback, st.ServerHSErr = ps.ServerSMC, ps.ServerFallback, ps.ServerHandshakeErr
	st.Reasons = map[string]uint64{}
	for code, n := range ps.ServerReasons {
		st.Reasons[fmt.Sprintf("%#08x", code)] = n
	}
	return st
}

// recordingCreds are smccreds that also count the modes their AuthInfo reports.
type recordingCreds struct {
	credentials.TransportCredentials
	s *server
}

func (rc recordingCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := rc.TransportCredentials.ServerHandshake(c)
	if err != nil {
		return nil, nil, err
	}
	mode := "?"
	if i, ok := info.(smccreds.Info); ok {
		mode = i.Mode
	}
	rc.s.add(c, rc.s.grpcModes, mode)
	return conn, info, nil
}

// recordingListener records the connections net/http accepts.
type recordingListener struct {
	net.Listener
	s *server
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.s.add(c, l.s.httpModes, modeOf(c))
	}
	return c, err
}

// serveBytes answers GET /bytes?n=N&seq=S with the N-byte pattern of S.
func serveBytes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err1 := strconv.Atoi(q.Get("n"))
	seq, err2 := strconv.ParseUint(q.Get("seq"), 10, 64)
	if err := errors.Join(err1, err2); err != nil || n < 0 || n > bulk.MaxPattern {
		http.Error(w, fmt.Sprintf("want /bytes?n=0..%d&seq=S", bulk.MaxPattern), http.StatusBadRequest)
		return
	}
	// When the handler started, for the client's per-phase times (wall clock, which
	// both processes of one host share).
	w.Header().Set(handlerStartHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(bulk.Pattern(seq, n))
}

// rawChunk is the size of a raw stream's writes and reads: the 32 KiB of gRPC's write and
// read buffers (grpc.WriteBufferSize, grpc.ReadBufferSize), which is what its transport's
// Writes and Reads of a 64 KiB message's frames come to.
const rawChunk = 32 << 10

// serveRaw serves raw streams until ln is closed: on each connection the client writes
// the stream whose byte at offset i is bulk.Pattern(i, 1)[0], then closes its write side;
// the server reads it in rawChunk reads, checks every byte, and answers the number of
// bytes it checked and the connection's mode ("<bytes> <mode>"). A byte out of place
// ends the connection without an answer.
func serveRaw(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, rawChunk)
			var off uint64
			for {
				n, err := c.Read(buf)
				if cerr := bulk.CheckPattern(buf[:n], off); cerr != nil {
					log.Printf("raw stream from %s: at byte %d: %v", c.RemoteAddr(), off, cerr)
					return
				}
				off += uint64(n)
				if errors.Is(err, io.EOF) {
					fmt.Fprintf(c, "%d %s", off, modeOf(c))
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// serveChild is the child process: a gRPC server (the Bulk service), an HTTP server and a
// raw stream sink (serveRaw) on transport tr, until the parent closes its standard input. A cpu of 0 or more pins the
// process to that CPU first.
func serveChild(tr, dir string, cpu int) error {
	if cpu >= 0 {
		if _, err := cpupin.Process(cpu); err != nil {
			return err
		}
	}
	gln, err := listen(tr, dir, "grpc")
	if err != nil {
		return err
	}
	hln, err := listen(tr, dir, "http")
	if err != nil {
		gln.Close()
		return err
	}
	rln, err := listen(tr, dir, "raw")
	if err != nil {
		gln.Close()
		hln.Close()
		return err
	}
	defer rln.Close()
	go serveRaw(rln)
	s := &server{grpcModes: map[string]int{}, httpModes: map[string]int{}}
	gs := grpc.NewServer(grpc.Creds(recordingCreds{smccreds.New(), s}), bulk.ServerOption())
	bulk.Register(gs, &bulk.Service{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bytes", serveBytes)
	hs := &http.Server{Handler: mux}

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gln) }()
	go func() { errc <- hs.Serve(recordingListener{hln, s}) }()
	child.Ready(gln.Addr().String(), hln.Addr().String(), rln.Addr().String())
	err = child.Serve(func(req string) string {
		switch req {
		case "cpu":
			t, err := processCPU()
			if err != nil {
				return "error " + err.Error()
			}
			return fmt.Sprintf("%d %d %d %d", t.User, t.Sys, t.Voluntary, t.Forced)
		case "placement":
			// Every thread must still be on the CPU the parent asked for.
			if cpu < 0 {
				return "error not pinned"
			}
			n, err := cpupin.Placement(cpu)
			if err != nil {
				return "error " + err.Error()
			}
			return fmt.Sprintf("%d %d", n, runtime.GOMAXPROCS(0))
		case "stats":
			b, err := json.Marshal(s.stats())
			if err != nil {
				return "error " + err.Error()
			}
			return string(b)
		}
		return "error unknown request " + strconv.Quote(req)
	})
	gs.Stop()
	hs.Close()
	for range 2 {
		if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	}
	return err
}
