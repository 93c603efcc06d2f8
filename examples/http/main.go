// Command http serves files with net/http over smcloop and fetches them with net/http's
// client, in two processes. With no flags it runs both from one command: it writes a file
// to a temporary directory, starts itself again as the server of that directory, fetches
// the file twice over one pooled connection and stops the server:
//
//	go run ./examples/http
//
// Or run the server and the client in two shells:
//
//	go run ./examples/http -listen 127.0.0.1:8080 -dir .
//	go run ./examples/http -get http://127.0.0.1:8080/README.md
//
// The client's http.Transport dials with smcloop.DialContext. The server reaches each
// request's connection through http.Server.ConnContext and names its mode in the
// Smcloop-Mode response header: SMCD, or the TCP fallback with its reason. It corks each
// response and sends file bodies with Conn.ReadFrom (page cache straight into the peer's
// buffer), so headers and body leave in one publication.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/examples/internal/child"
)

// modeHeader is the response header in which the server names its connection's mode.
const modeHeader = "Smcloop-Mode"

type connKey struct{}

func main() {
	listen := flag.String("listen", "", "address to serve on")
	dir := flag.String("dir", ".", "directory to serve")
	get := flag.String("get", "", "URL to fetch; the body goes to standard output")
	asChild := flag.Bool("child", false, "serve as the server process of the one-command mode")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: http                             server and client, two processes\n"+
			"       http -listen ADDR [-dir DIR]     the server\n"+
			"       http -get URL                    the client\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	log.SetFlags(0)
	var err error
	switch {
	case flag.NArg() > 0:
		flag.Usage()
		os.Exit(2)
	case *listen != "":
		err = serve(*listen, *dir, *asChild)
	case *get != "":
		err = fetchToStdout(*get)
	default:
		err = both()
	}
	if err != nil {
		log.Fatalf("http: %v", err)
	}
}

// handler serves dir, corking each response and naming the connection's mode.
func handler(dir string) http.Handler {
	files := http.FileServer(http.Dir(dir))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := r.Context().Value(connKey{}).(*smcloop.Conn)
		if !ok {
			w.Header().Set(modeHeader, "not an smcloop connection")
			files.ServeHTTP(w, r)
			return
		}
		w.Header().Set(modeHeader, c.Mode())
		c.SetCork(true)        // headers and body go out together...
		defer c.SetCork(false) // ...when the handler is done
		files.ServeHTTP(w, r)
	})
}

func serve(addr, dir string, asChild bool) error {
	ln, err := smcloop.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		// The connection Accept returned, a *smcloop.Conn, for the handler to see.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
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

// newClient returns a client whose Transport dials with smcloop. smcloop.DialContext
// returns once the TCP connection is up and runs the CLC handshake in the background, so
// the Transport pools smcloop connections as it pools TCP ones.
func newClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{DialContext: smcloop.DialContext},
		Timeout:   30 * time.Second,
	}
}

// result is what one GET saw.
type result struct {
	status     string
	body       []byte
	clientMode string // the client connection's Mode()
	serverMode string // the server's, from the response header
	reused     bool   // the Transport took the connection from its pool
}

func fetch(client *http.Client, url string) (result, error) {
	var res result
	var conn net.Conn
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { conn, res.reused = info.Conn, info.Reused },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return res, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	res.status, res.serverMode = resp.Status, resp.Header.Get(modeHeader)
	if res.body, err = io.ReadAll(resp.Body); err != nil {
		return res, fmt.Errorf("GET %s: reading the body: %w", url, err)
	}
	if c, ok := conn.(*smcloop.Conn); ok {
		res.clientMode = c.Mode()
	} else {
		res.clientMode = fmt.Sprintf("not an smcloop connection (%T)", conn)
	}
	if resp.StatusCode != http.StatusOK {
		return res, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return res, nil
}

func fetchToStdout(url string) error {
	res, err := fetch(newClient(), url)
	if err != nil {
		return err
	}
	log.Printf("%s: %d bytes; client connection %s, server connection %s",
		res.status, len(res.body), res.clientMode, res.serverMode)
	_, err = os.Stdout.Write(res.body)
	return err
}

// both writes a file, serves it from a child process and fetches it twice.
func both() error {
	dir, err := os.MkdirTemp("", "smcloop-http")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	content := []byte("hello over net/http, through shared memory\n")
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), content, 0o644); err != nil {
		return err
	}
	srv, err := child.Start("-child", "-listen", "127.0.0.1:0", "-dir", dir)
	if err != nil {
		return err
	}
	fmt.Printf("server (pid %d) serving %s on http://%s\n", srv.Pid(), dir, srv.Addr)
	err = fetchTwice(newClient(), "http://"+srv.Addr+"/hello.txt", content)
	if serr := srv.Stop(); err == nil {
		err = serr
	}
	return err
}

func fetchTwice(client *http.Client, url string, want []byte) error {
	for range 2 {
		res, err := fetch(client, url)
		if err != nil {
			return err
		}
		how := "a new connection"
		if res.reused {
			how = "the pooled connection"
		}
		fmt.Printf("GET %s: %s, %d bytes %q\n", url, res.status, len(res.body), res.body)
		fmt.Printf("  client: %s (%s)\n  server: %s\n", res.clientMode, how, res.serverMode)
		if !bytes.Equal(res.body, want) {
			return fmt.Errorf("GET %s: the body differs from the file", url)
		}
	}
	return nil
}
