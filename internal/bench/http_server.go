package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The server side of the HTTP mode. A server child started with --http METHOD writes the
// file to a fresh temporary directory, listens, serves HTTP/1.1 on every connection
// until its parent writes "stop" on its stdin, then shuts the server down (connections
// in progress get serverDrain to finish), prints "REPORT <json>" (an HTTPServerStats)
// and removes the directory.

// httpFileServer serves one file by one method and keeps the account.
type httpFileServer struct {
	tr      Transport
	method  string
	dir     string
	path    string // the file on disk
	urlPath string
	size    int
	bufs    sync.Pool // *[]byte of size bytes, for the write method

	requests, failed, readFroms, fileReadFroms atomic.Uint64
	errs                                       errorList

	mu     sync.Mutex
	open   map[*httpConn]struct{}
	conns  uint64
	send   *SendStats // counters of the connections that have closed
	closed bool       // the account is taken: closing connections no longer add to it
}

// newHTTPFileServer writes the file of size bytes to a fresh temporary directory.
func newHTTPFileServer(tr Transport, method string, size int) (*httpFileServer, error) {
	if method != HTTPSendfile && method != HTTPWrite {
		return nil, fmt.Errorf("method %q: want %s or %s", method, HTTPSendfile, HTTPWrite)
	}
	if size < 1 || size > MaxSize {
		return nil, fmt.Errorf("file size %d: must be between 1 and %d", size, MaxSize)
	}
	dir, err := os.MkdirTemp("", "smcloop-bench-http-")
	if err != nil {
		return nil, err
	}
	name := httpFileName(size)
	s := &httpFileServer{
		tr: tr, method: method, dir: dir, path: filepath.Join(dir, name), urlPath: "/" + name, size: size,
		open: make(map[*httpConn]struct{}),
	}
	s.bufs.New = func() any {
		b := make([]byte, size)
		return &b
	}
	if err := os.WriteFile(s.path, httpBody(size), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// remove deletes the file and its directory.
func (s *httpFileServer) remove() error { return os.RemoveAll(s.dir) }

// fail counts a request the server could not serve, or a server error.
func (s *httpFileServer) fail(err error) {
	s.failed.Add(1)
	s.errs.add(err.Error())
}

// serve runs the HTTP server on ln until the "stop" command and prints the report;
// ctx ending first is a failure.
func (s *httpFileServer) serve(ctx context.Context, ln net.Listener, cmds <-chan string, stdout io.Writer) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: httpTimeout,
		IdleTimeout:       2 * httpTimeout,
		ErrorLog:          log.New(serverErrorLog{s}, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, httpConnKey{}, c)
		},
		ConnState: s.connState,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(httpListener{ln, s}) }()

	var err error
	var mark *cpuMark // the start of the measured requests, if the client marked it
	var cpu cpuSpan
	for stop := false; !stop && err == nil; {
		select {
		case <-ctx.Done():
			err = fmt.Errorf("stopped before the client was done: %w", context.Cause(ctx))
		case serr := <-served:
			err = fmt.Errorf("serving: %w", serr)
		case cmd, ok := <-cmds:
			switch {
			case !ok && ctx.Err() != nil:
				err = fmt.Errorf("stopped before the client was done: %w", context.Cause(ctx))
			case !ok, cmd == "stop":
				stop = true
				if mark != nil {
					cpu = mark.spanSince(s.requests.Load())
				}
			case cmd == "mark":
				m := markCPU(s.requests.Load())
				mark = &m
				if _, werr := fmt.Fprintln(stdout, "MARK ok"); werr != nil {
					err = fmt.Errorf("answering mark: %w", werr)
				}
			default:
				err = fmt.Errorf("%w: unknown command %q", ErrProtocol, cmd)
			}
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), serverDrain)
	serr := srv.Shutdown(sctx)
	cancel()
	if serr != nil {
		srv.Close()
		s.fail(fmt.Errorf("connections still busy %v after the end of the run; closed", serverDrain))
	}
	if err != nil {
		return err
	}
	account := s.account()
	if mark != nil {
		account.CPUUserNS, account.CPUSysNS, account.CPUWindowNS, account.CPUServed = int64(cpu.user), int64(cpu.sys), int64(cpu.wall), cpu.ops
	}
	b, err := json.Marshal(account)
	if err == nil {
		_, err = fmt.Fprintf(stdout, "REPORT %s\n", b)
	}
	if err != nil {
		return fmt.Errorf("sending the report: %w", err)
	}
	return nil
}

// account takes the server's account: the closed connections' counters and those of
// the ones still open. Connections closing after it add nothing.
func (s *httpFileServer) account() HTTPServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	send := s.send
	for c := range s.open {
		if st, ok := s.sendStats(c); ok {
			addSendStats(&send, st)
		}
	}
	return HTTPServerStats{
		Conns: s.conns, Requests: s.requests.Load(), Failed: s.failed.Load(), Errors: s.errs.list(),
		ReadFroms: s.readFroms.Load(), FileReadFroms: s.fileReadFroms.Load(), Send: send,
	}
}

func (s *httpFileServer) sendStats(c *httpConn) (SendStats, bool) {
	if s.tr.SendStats == nil {
		return SendStats{}, false
	}
	st, ok := s.tr.SendStats(c.Conn)
	st.Conns = 1
	return st, ok
}

// connState keeps the set of open connections and adds up the counters of the ones
// that close.
func (s *httpFileServer) connState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*httpConn)
	if !ok || state == http.StateActive || state == http.StateIdle {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	switch state {
	case http.StateNew:
		s.open[c] = struct{}{}
		s.conns++
	case http.StateClosed, http.StateHijacked:
		if _, ok := s.open[c]; !ok {
			return
		}
		delete(s.open, c)
		if st, ok := s.sendStats(c); ok {
			addSendStats(&s.send, st)
		}
	}
}

// ServeHTTP serves the file by the server's method.
func (s *httpFileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != s.urlPath || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		s.fail(fmt.Errorf("unexpected request %s %s", r.Method, r.URL.Path))
		http.NotFound(w, r)
		return
	}
	var err error
	if s.method == HTTPSendfile {
		err = s.sendfile(w, r)
	} else {
		err = s.write(w)
	}
	if err != nil {
		s.fail(err)
		return
	}
	s.requests.Add(1)
}

// openFile opens the served file for one response; a failure is answered with a 500.
func (s *httpFileServer) openFile(w http.ResponseWriter) (*os.File, os.FileInfo, error) {
	f, err := os.Open(s.path)
	if err != nil {
		http.Error(w, "cannot open the file", http.StatusInternalServerError)
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		http.Error(w, "cannot stat the file", http.StatusInternalServerError)
		return nil, nil, err
	}
	return f, fi, nil
}

// sendfile corks the connection, serves the file with http.ServeContent (the body goes
// through the connection's ReadFrom), flushes and uncorks: nginx's sendfile on with
// tcp_nopush.
func (s *httpFileServer) sendfile(w http.ResponseWriter, r *http.Request) error {
	f, fi, err := s.openFile(w)
	if err != nil {
		return err
	}
	defer f.Close()
	conn, _ := r.Context().Value(httpConnKey{}).(*httpConn)
	if conn == nil {
		return errors.New("the request has no connection")
	}
	cork := s.tr.Cork
	if cork != nil {
		if err := cork(conn.Conn, true); err != nil {
			return fmt.Errorf("cork: %w", err)
		}
	}
	http.ServeContent(w, r, s.path, fi.ModTime(), f)
	ferr := http.NewResponseController(w).Flush()
	if cork != nil {
		if err := cork(conn.Conn, false); err != nil {
			return fmt.Errorf("uncork: %w", err)
		}
	}
	if ferr != nil {
		return fmt.Errorf("flushing the response: %w", ferr)
	}
	return nil
}

// write reads the file into a buffer and writes it, without corking: nginx's sendfile
// off. The headers are the ones http.ServeContent sets.
func (s *httpFileServer) write(w http.ResponseWriter) error {
	f, fi, err := s.openFile(w)
	if err != nil {
		return err
	}
	defer f.Close()
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	buf := *bp
	if _, err := io.ReadFull(f, buf); err != nil {
		http.Error(w, "cannot read the file", http.StatusInternalServerError)
		return err
	}
	h := w.Header()
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(buf)))
	h.Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("writing the body: %w", err)
	}
	return nil
}

// httpConnKey is the request context key of the server connection.
type httpConnKey struct{}

// httpListener hands net/http every accepted connection wrapped in an httpConn.
type httpListener struct {
	net.Listener
	srv *httpFileServer
}

func (l httpListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &httpConn{Conn: c, srv: l.srv}, nil
}

// httpConn is a server connection that counts what net/http hands to its ReadFrom: the
// response bodies it does not copy itself. It passes them on to the transport's own
// ReadFrom (sendfile on TCP, page cache to DMB on smcloop).
type httpConn struct {
	net.Conn
	srv *httpFileServer
}

// ReadFrom passes r on to the connection's ReadFrom, counting it, and whether r reads
// from a file: an *os.File, the wrapper os.File.WriteTo hands to io.Copy, or either
// within the *io.LimitedReader of io.CopyN (http.ServeContent).
func (c *httpConn) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := c.Conn.(io.ReaderFrom)
	if !ok {
		return io.Copy(writerOnly{c.Conn}, r)
	}
	c.srv.readFroms.Add(1)
	src := r
	if lr, ok := src.(*io.LimitedReader); ok {
		src = lr.R
	}
	if _, ok := src.(interface{ Stat() (os.FileInfo, error) }); ok {
		c.srv.fileReadFroms.Add(1)
	}
	return rf.ReadFrom(r)
}

// CloseWrite half-closes the connection where the transport can: net/http uses it to
// close a connection gracefully.
func (c *httpConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// writerOnly hides every method but Write.
type writerOnly struct{ io.Writer }

// serverErrorLog counts what net/http logs (accept errors, panics in handlers) as server
// failures.
type serverErrorLog struct{ s *httpFileServer }

func (l serverErrorLog) Write(p []byte) (int, error) {
	l.s.fail(errors.New(strings.TrimSpace(string(p))))
	return len(p), nil
}
