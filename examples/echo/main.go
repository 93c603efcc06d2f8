// Command echo is the smallest smcloop program: an echo server and a client in two
// processes on one host. With no flags it runs both from one command: it starts itself
// again as the server, sends a message, checks the echo and stops the server:
//
//	go run ./examples/echo
//
// Or run the server and the client in two shells:
//
//	go run ./examples/echo -listen 127.0.0.1:7000
//	go run ./examples/echo -dial 127.0.0.1:7000 hello
//
// The client prints what the server sent back and whether the bytes went through shared
// memory (SMCD) or fell back to TCP, with the reason.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/examples/internal/child"
)

func main() {
	listen := flag.String("listen", "", "address to serve on")
	dial := flag.String("dial", "", "address to connect to; the arguments are the message")
	asChild := flag.Bool("child", false, "serve as the server process of the one-command mode")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: echo                          server and client, two processes\n"+
			"       echo -listen ADDR             the server\n"+
			"       echo -dial ADDR [message...]  the client\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	log.SetFlags(0)
	var err error
	switch {
	case *listen != "":
		err = serve(*listen, *asChild)
	case *dial != "":
		msg := strings.Join(flag.Args(), " ")
		if msg == "" {
			msg = "hello"
		}
		err = call(*dial, msg)
	case flag.NArg() > 0:
		flag.Usage()
		os.Exit(2)
	default:
		err = both()
	}
	if err != nil {
		log.Fatalf("echo: %v", err)
	}
}

// both runs the server as a child process and the client against it.
func both() error {
	srv, err := child.Start("-child", "-listen", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("server (pid %d) listening on %s\n", srv.Pid(), srv.Addr)
	err = call(srv.Addr, "hello through shared memory")
	if serr := srv.Stop(); err == nil {
		err = serr
	}
	return err
}

// serve echoes every connection's bytes back to it. As the child of the one-command
// mode it announces its address, serves until the parent closes its standard input and
// then prints the modes of the connections it served.
func serve(addr string, asChild bool) error {
	ln, err := smcloop.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		modes []string
		wg    sync.WaitGroup
	)
	accepted := make(chan error, 1)
	go func() {
		for {
			c, err := ln.AcceptSMC()
			var fallback *smcloop.FallbackError
			if errors.As(err, &fallback) { // SMCLOOP_REQUIRE_SMC=on: refused, go on
				log.Printf("accept: %v", err)
				continue
			}
			if err != nil {
				accepted <- err
				return
			}
			if asChild {
				mu.Lock()
				modes = append(modes, c.Mode())
				mu.Unlock()
			} else {
				log.Printf("%s: %s", c.RemoteAddr(), c.Mode())
			}
			wg.Go(func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err != nil { // Conn.WriteTo: straight out of shared memory
					log.Printf("%s: %v", c.RemoteAddr(), err)
				}
			})
		}
	}()
	if !asChild {
		log.Printf("echo server on %s", ln.Addr())
		return <-accepted
	}
	child.Ready(ln.Addr().String())
	werr := child.WaitParent()
	ln.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("accept: %w", err)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("server: served %d connection(s): %s\n", len(modes), strings.Join(modes, ", "))
	return werr
}

// call sends msg, half-closes, reads the echo to EOF and checks it.
func call(addr, msg string) error {
	c, err := smcloop.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	reply, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	fmt.Printf("client: sent %q, got back %q over %s\n", msg, reply, c.Mode())
	if string(reply) != msg {
		return fmt.Errorf("the echo differs from the message")
	}
	return nil
}
