// Command http serves files with net/http over smcloop and fetches one with net/http's
// client, in two processes:
//
//	go run ./examples/http -listen 127.0.0.1:8080 -dir .
//	go run ./examples/http -get http://127.0.0.1:8080/README.md
//
// The server corks each response and sends file bodies with Conn.ReadFrom (page cache
// straight into the peer's buffer), so headers and body leave in one publication.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/smcloop/smcloop"
)

type connKey struct{}

func main() {
	listen := flag.String("listen", "", "address to serve on")
	dir := flag.String("dir", ".", "directory to serve")
	get := flag.String("get", "", "URL to fetch")
	flag.Parse()
	switch {
	case *listen != "":
		serve(*listen, *dir)
	case *get != "":
		fetch(*get)
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func serve(addr, dir string) {
	ln, err := smcloop.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	files := http.FileServer(http.Dir(dir))
	srv := &http.Server{
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, ok := r.Context().Value(connKey{}).(*smcloop.Conn); ok {
				c.SetCork(true)        // headers and body go out together...
				defer c.SetCork(false) // ...when the handler is done
			}
			files.ServeHTTP(w, r)
		}),
	}
	log.Printf("serving %s on http://%s", dir, ln.Addr())
	log.Fatal(srv.Serve(ln))
}

func fetch(url string) {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d smcloop.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				log.Printf("connected to %s: %s", addr, c.Mode())
			}
			return c, err
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(os.Stdout, resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%s: %d bytes", resp.Status, n)
}
