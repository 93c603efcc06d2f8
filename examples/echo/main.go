// Command echo is the smallest smcloop program: an echo server and a client in two
// processes on one host. Run the server, then the client:
//
//	go run ./examples/echo -listen 127.0.0.1:7000
//	go run ./examples/echo -dial 127.0.0.1:7000 hello
//
// The client prints what the server sent back and whether the bytes went through shared
// memory (SMCD) or fell back to TCP.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/smcloop/smcloop"
)

func main() {
	listen := flag.String("listen", "", "address to serve on")
	dial := flag.String("dial", "", "address to connect to")
	flag.Parse()
	switch {
	case *listen != "":
		serve(*listen)
	case *dial != "":
		call(*dial, strings.Join(flag.Args(), " "))
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func serve(addr string) {
	ln, err := smcloop.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("echo server on %s", ln.Addr())
	for {
		c, err := ln.AcceptSMC()
		if err != nil {
			log.Fatal(err)
		}
		log.Printf("%s: %s", c.RemoteAddr(), c.Mode())
		go func() {
			defer c.Close()
			io.Copy(c, c) // Conn.WriteTo: straight out of shared memory
		}()
	}
}

func call(addr, msg string) {
	c, err := smcloop.Dial("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, msg); err != nil {
		log.Fatal(err)
	}
	c.CloseWrite()
	reply, err := io.ReadAll(c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (%s)\n", reply, c.Mode())
}
