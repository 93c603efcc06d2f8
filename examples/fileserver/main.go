// Command fileserver is a net/http file server over smcloop that sends file bodies on the
// sendfile path and corks each response, and a client that fetches files, checks them
// and shows, from the server connection's counters, that both were used. With no flags
// it runs both from one command: it writes files of 1 KiB, 1 MiB and 16 MiB to a
// temporary directory, starts itself again as the server of that directory, fetches each
// file, verifies its SHA-256 and stops the server:
//
//	go run ./examples/fileserver
//
// Or run the server and the client in two shells:
//
//	go run ./examples/fileserver -listen 127.0.0.1:8080 -dir .
//	go run ./examples/fileserver -get http://127.0.0.1:8080/README.md
//
// http.FileServer copies a file into the response with io.Copy, which reaches the
// connection's ReadFrom: on smcloop, ReadFrom from an *os.File reads the page cache
// straight into the peer's shared-memory buffer and corks all but the last piece. The
// handler corks the whole response (Conn.SetCork, reaching the *smcloop.Conn through
// http.Server.ConnContext), so the headers leave with the body. After each file the
// client asks the server, on the same connection, for that response's send-path counters
// (Conn.Stats: SendfileCalls, CorkPushes, Pushes).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/examples/internal/child"
)

// statsPath is where the server reports the counters of the connection's last file
// response; it shadows a file of that name in the served directory.
const statsPath = "/_smcloop/stats"

func main() {
	listen := flag.String("listen", "", "address to serve on")
	dir := flag.String("dir", ".", "directory to serve")
	get := flag.String("get", "", "URL to fetch; further URLs may follow as arguments")
	asChild := flag.Bool("child", false, "serve as the server process of the one-command mode")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: fileserver                          server and client, two processes\n"+
			"       fileserver -listen ADDR [-dir DIR]  the server\n"+
			"       fileserver -get URL [URL...]        the client\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	log.SetFlags(0)
	var err error
	switch {
	case *listen != "":
		if flag.NArg() > 0 {
			flag.Usage()
			os.Exit(2)
		}
		err = serve(*listen, *dir, *asChild)
	case *get != "":
		err = getURLs(append([]string{*get}, flag.Args()...))
	case flag.NArg() > 0:
		flag.Usage()
		os.Exit(2)
	default:
		err = both()
	}
	if err != nil {
		log.Fatalf("fileserver: %v", err)
	}
}

// sendStats are the send-path counters of one response on the server's connection.
type sendStats struct {
	Mode string // the server connection's Mode()
	Path string // the response they count; empty before the connection's first file
	// From Conn.Stats: ReadFrom calls from a file, publications made by clearing the cork,
	// all producer-cursor publications, and application bytes through shared memory and
	// over TCP (headers included).
	SendfileCalls, CorkPushes, Pushes uint64
	SMCBytesSent, TCPBytesSent        uint64
}

// connState is the server's view of one connection, shared by its requests.
type connState struct {
	conn   *smcloop.Conn
	mu     sync.Mutex
	path   string            // the last file response
	before smcloop.ConnStats // the counters as it began
}

type connKey struct{}

// handler serves dir, corking each response, and answers statsPath.
func handler(dir string) http.Handler {
	files := http.FileServer(http.Dir(dir))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs, ok := r.Context().Value(connKey{}).(*connState)
		if !ok {
			files.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == statsPath {
			serveStats(w, cs)
			return
		}
		cs.mu.Lock()
		cs.path, cs.before = r.URL.Path, cs.conn.Stats()
		cs.mu.Unlock()
		// Corked, the headers wait in the send space for the body; ReadFrom (reached by
		// http.ServeContent's io.Copy) adds the file's pages, and uncorking publishes the
		// lot at once. A body shorter than net/http's 512-byte sniffing buffer leaves with
		// its headers in one write after the handler returns.
		cs.conn.SetCork(true)
		defer cs.conn.SetCork(false)
		files.ServeHTTP(w, r)
	})
}

// serveStats reports the counters of the connection's last file response. HTTP/1.1
// serves a connection's requests one after the other, so that response has been
// written in full.
func serveStats(w http.ResponseWriter, cs *connState) {
	now := cs.conn.Stats()
	cs.mu.Lock()
	st := sendStats{Mode: cs.conn.Mode(), Path: cs.path}
	if cs.path != "" {
		b := cs.before
		st.SendfileCalls = now.SendfileCalls - b.SendfileCalls
		st.CorkPushes = now.CorkPushes - b.CorkPushes
		st.Pushes = now.Pushes - b.Pushes
		st.SMCBytesSent = now.SMCBytesSent - b.SMCBytesSent
		st.TCPBytesSent = now.TCPBytesSent - b.TCPBytesSent
	}
	cs.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

func serve(addr, dir string, asChild bool) error {
	if fi, err := os.Stat(dir); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	ln, err := smcloop.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if sc, ok := c.(*smcloop.Conn); ok {
				return context.WithValue(ctx, connKey{}, &connState{conn: sc})
			}
			return ctx
		},
		Handler:           handler(dir),
		ReadHeaderTimeout: 30 * time.Second,
	}
	if !asChild {
		log.Printf("serving %s on http://%s", dir, ln.Addr())
		return srv.Serve(ln)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	child.Ready(ln.Addr().String())
	werr := child.WaitParent()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return werr
}

// client fetches over one pooled smcloop connection and checks that it stays one.
type client struct {
	http *http.Client
	conn net.Conn // the connection of the first request
}

func newClient() *client {
	return &client{http: &http.Client{
		Transport: &http.Transport{DialContext: smcloop.DialContext},
		Timeout:   60 * time.Second,
	}}
}

// get fetches url into w and returns the response's length.
func (c *client) get(url string, w io.Writer) (int64, error) {
	var conn net.Conn
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { conn = info.Conn },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("GET %s: reading the body: %w", url, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("GET %s: %d bytes, Content-Length said %d", url, n, resp.ContentLength)
	}
	if c.conn == nil {
		c.conn = conn
	} else if conn != c.conn {
		return n, fmt.Errorf("GET %s: the client opened a second connection; the server's counters are per connection", url)
	}
	return n, nil
}

// stats asks the server for the counters of the last file response on our connection.
func (c *client) stats(base *url.URL) (sendStats, error) {
	var st sendStats
	var body strings.Builder
	if _, err := c.get(base.ResolveReference(&url.URL{Path: statsPath}).String(), &body); err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(body.String()), &st); err != nil {
		return st, fmt.Errorf("%s: %w", statsPath, err)
	}
	return st, nil
}

func (c *client) mode() string {
	if sc, ok := c.conn.(*smcloop.Conn); ok {
		return sc.Mode()
	}
	return fmt.Sprintf("not an smcloop connection (%T)", c.conn)
}

// file is one file to fetch, with its SHA-256 if known.
type file struct {
	url    *url.URL
	sha256 string
}

// fetchAll fetches the files over one connection and prints a line for each: its
// size, time, throughput, digest and the server's send-path counters for it. It fails
// on a digest that differs from the one given.
func fetchAll(files []file) error {
	if len(files) == 0 {
		return nil
	}
	c := newClient()
	// Open the connection (and finish its handshake) before timing anything.
	st, err := c.stats(files[0].url)
	if err != nil {
		return err
	}
	fmt.Printf("client connection: %s\nserver connection: %s\n\n", c.mode(), st.Mode)
	const row = "%-12s %8s %11s %9s  %-16s %-5s %13s %10s %6s\n"
	fmt.Printf(row, "file", "size", "time", "MB/s", "sha256", "", "SendfileCalls", "CorkPushes", "Pushes")
	var failed []string
	for _, f := range files {
		h := sha256.New()
		start := time.Now()
		n, err := c.get(f.url.String(), h)
		elapsed := time.Since(start)
		if err != nil {
			return err
		}
		sum := hex.EncodeToString(h.Sum(nil))
		check := ""
		if f.sha256 != "" {
			check = "ok"
			if sum != f.sha256 {
				check = "MISMATCH"
				failed = append(failed, fmt.Sprintf("%s: SHA-256 %s, want %s", f.url, sum, f.sha256))
			}
		}
		st, err := c.stats(f.url)
		if err != nil {
			return err
		}
		fmt.Printf(row, f.url.Path, size(n), elapsed.Round(time.Microsecond),
			fmt.Sprintf("%.1f", float64(n)/1e6/elapsed.Seconds()), sum[:16], check,
			fmt.Sprint(st.SendfileCalls), fmt.Sprint(st.CorkPushes), fmt.Sprint(st.Pushes))
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

func getURLs(urls []string) error {
	var files []file
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			return err
		}
		if u.Scheme != "http" || u.Host == "" {
			return fmt.Errorf("%s: want an http:// URL", s)
		}
		if len(files) > 0 && u.Host != files[0].url.Host {
			return fmt.Errorf("%s: all URLs must name the same server", s)
		}
		files = append(files, file{url: u})
	}
	return fetchAll(files)
}

// testFiles are the one-command mode's files: deterministic contents of three sizes.
var testFiles = []struct {
	name string
	size int64
}{
	{"1KiB.bin", 1 << 10},
	{"1MiB.bin", 1 << 20},
	{"16MiB.bin", 16 << 20},
}

// both writes the test files, serves them from a child process and fetches them.
func both() error {
	dir, err := os.MkdirTemp("", "smcloop-fileserver")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sums := make(map[string]string)
	for i, tf := range testFiles {
		if sums[tf.name], err = writeFile(filepath.Join(dir, tf.name), tf.size, uint64(i)); err != nil {
			return err
		}
	}
	srv, err := child.Start("-child", "-listen", "127.0.0.1:0", "-dir", dir)
	if err != nil {
		return err
	}
	fmt.Printf("server (pid %d) serving %s on http://%s\n", srv.Pid(), dir, srv.Addr)
	var files []file
	for _, tf := range testFiles {
		u := &url.URL{Scheme: "http", Host: srv.Addr, Path: "/" + tf.name}
		files = append(files, file{url: u, sha256: sums[tf.name]})
	}
	err = fetchAll(files)
	if serr := srv.Stop(); err == nil {
		err = serr
	}
	return err
}

// writeFile writes size bytes of a ChaCha8 stream seeded with seed and returns their
// SHA-256.
func writeFile(path string, size int64, seed uint64) (string, error) {
	var key [32]byte
	key[0] = byte(seed)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.CopyN(io.MultiWriter(f, h), rand.NewChaCha8(key), size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
