// Command unix is a service on a unix socket and its client, in two processes, started
// by one command:
//
//	go run ./examples/unix
//
// It listens on a socket in a new temporary directory, starts itself again as the
// client, and serves one upper-casing exchange per connection. Both processes print
// what is on the wire: SMCD when the bytes went through shared memory, or the fallback
// reason. The client's first connection is smcloop's; its second uses net.Dial, a
// plain unix client, which the same listener serves over the socket.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/smcloop/smcloop"
)

func main() {
	client := flag.String("client", "", "socket to connect to (the client process)")
	flag.Parse()
	if *client != "" {
		runClient(*client)
		return
	}
	runServer()
}

func runServer() {
	dir, err := os.MkdirTemp("", "smcloop-unix")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "upper.sock")
	ln, err := smcloop.Listen("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()

	cmd := exec.Command(os.Args[0], "-client", path)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("client: %v", err)
	}
}

// serve answers one line with the line upper-cased.
func serve(c *smcloop.Conn) {
	defer c.Close()
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		log.Printf("server: %v", err)
		return
	}
	fmt.Printf("server (pid %d): a client over %s\n", os.Getpid(), c.Mode())
	c.Write(bytes.ToUpper(line))
}

func runClient(path string) {
	c, err := smcloop.Dial("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	ask(c, "hello through shared memory")
	fmt.Printf("client (pid %d): %s\n", os.Getpid(), c.Mode())

	plain, err := net.Dial("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	ask(plain, "hello from a plain unix client")
}

// ask sends one line, prints the answer and closes c.
func ask(c net.Conn, msg string) {
	defer c.Close()
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		log.Fatal(err)
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("client: %q -> %q\n", msg, answer)
}
