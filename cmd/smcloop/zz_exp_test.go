package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smcloop/smcloop"
)

type ck struct{}

func TestZZExp(t *testing.T) {
	dir := t.TempDir()
	fn := filepath.Join(dir, "4k.html")
	body := make([]byte, 4096)
	for i := range body { body[i] = byte(i*7) }
	os.WriteFile(fn, body, 0o644)
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil { t.Fatal(err) }
	var conns []*smcloop.Conn
	mode := os.Getenv("EXPMODE")
	srv := &http.Server{
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { conns = append(conns, c.(*smcloop.Conn)); return context.WithValue(ctx, ck{}, c) },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := r.Context().Value(ck{}).(*smcloop.Conn)
			c.SetCork(true)
			f, _ := os.Open(fn)
			if mode == "copy" {
				st, _ := f.Stat()
				w.Header().Set("Content-Length", "4096")
				w.Header().Set("Content-Type", "text/html")
				_ = st
				io.Copy(w, f)
			} else {
				fi, _ := f.Stat()
				http.ServeContent(w, r, fn, fi.ModTime(), f)
			}
			f.Close()
			http.NewResponseController(w).Flush()
			c.SetCork(false)
		}),
	}
	go srv.Serve(ln)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := smcloop.Dialer{}
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}}
	cl := &http.Client{Transport: tr}
	for i := 0; i < 10; i++ {
		resp, err := cl.Get("http://x/4k.html")
		if err != nil { t.Fatal(err) }
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != string(body) { t.Fatal("mismatch") }
	}
	time.Sleep(50*time.Millisecond)
	for _, c := range conns { t.Logf("%+v", c.Stats()) }
}
