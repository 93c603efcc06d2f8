//go:build linux

package introspect

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/smcloop/smcloop/internal/backoff"
	"github.com/smcloop/smcloop/shm"
)

// Server limits.
const (
	// MaxQueries bounds the queries answered at a time; a querier beyond it is refused
	// (ErrCodeBusy) at once.
	MaxQueries = 4
	// MaxRequest bounds a request line.
	MaxRequest = 4096
	// RequestTimeout bounds the wait for the request.
	RequestTimeout = 2 * time.Second
	// ResponseTimeout bounds writing the response.
	ResponseTimeout = 10 * time.Second
	// refuseTimeout bounds writing a refusal (a few bytes into a fresh socket).
	refuseTimeout = 100 * time.Millisecond
)

// Handler answers a permitted query; the server fills in V and Process.
type Handler func(Request) Response

// Server is a process's endpoint.
type Server struct {
	ln     *net.UnixListener
	handle Handler
	self   Process
	slots  chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// Listen starts serving handle on the abstract unix stream socket name (Name(pid) for a
// process's own endpoint). It fails with an error wrapping EADDRINUSE if another socket
// holds the name.
func Listen(name string, handle Handler) (*Server, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, handle: handle, self: Self(), slots: make(chan struct{}, MaxQueries), done: make(chan struct{})}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Close stops serving and waits for the queries being answered.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ln.Close()
	})
	s.wg.Wait()
	return err
}

// Permitted reports whether a process of uid may query this one: the same uid (real or
// effective) or root.
func Permitted(uid uint32) bool {
	return uid == 0 || uid == uint32(os.Geteuid()) || uid == uint32(os.Getuid())
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var retry backoff.Backoff
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EBADF) || errors.Is(err, syscall.EINVAL) {
				return
			}
			if retry.Wait(s.done) { // EMFILE and the like: another part of the process frees
				continue
			}
			return
		}
		retry.Reset()
		cred, err := shm.PeerCred(c)
		if err != nil || !Permitted(cred.Uid) {
			s.refuse(c, ErrCodeDenied, "permission denied: only the process's own user and root may query it")
			continue
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.refuse(c, ErrCodeBusy, "busy: too many queries at once; try again")
			continue
		}
		s.wg.Add(1)
		go s.serve(c)
	}
}

// refuse answers a query that is not served, without waiting on the querier.
func (s *Server) refuse(c *net.UnixConn, code, msg string) {
	c.SetWriteDeadline(time.Now().Add(refuseTimeout))
	b, _ := json.Marshal(Response{V: Version, Error: code, Message: msg})
	c.Write(append(b, '\n'))
	c.Close()
}

func (s *Server) serve(c *net.UnixConn) {
	defer s.wg.Done()
	defer func() { <-s.slots }()
	defer c.Close()
	defer func() { _ = recover() }() // a fault answering a query must not end the process
	c.SetReadDeadline(time.Now().Add(RequestTimeout))
	line, err := bufio.NewReader(io.LimitReader(c, MaxRequest)).ReadBytes('\n')
	if err != nil {
		return // too long, too slow, or gone
	}
	b, err := json.Marshal(respond(line, s.handle, s.self))
	if err != nil {
		return
	}
	c.SetWriteDeadline(time.Now().Add(ResponseTimeout))
	c.Write(append(b, '\n'))
}

// respond answers one request line (untrusted bytes) with handle.
func respond(line []byte, handle Handler, self Process) Response {
	var req Request
	var resp Response
	if err := json.Unmarshal(line, &req); err != nil || req.V != Version {
		resp = Response{Error: ErrCodeBadRequest, Message: "want one JSON line {\"v\":1,\"op\":...}"}
	} else {
		switch req.Op {
		case OpConns, OpStats, OpReset:
			resp = handle(req)
		default:
			resp = Response{Error: ErrCodeBadRequest, Message: "unknown op"}
		}
	}
	resp.V, resp.Process = Version, self
	return resp
}
