package smcloop_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/clc"
)

// echoServer listens on a free loopback port and echoes what one client sends until
// it closes its writing side. It returns the listener's address; the listener closes
// once that client has been served.
func echoServer() string {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	return ln.Addr().String()
}

// A client dials an smcloop listener; both sides are smcloop, so the bytes go through
// shared memory. (The server runs in the same process here; it works the same across
// processes.)
func ExampleDial() {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()

	c, err := smcloop.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, err := c.Write([]byte("hello")); err != nil {
		log.Fatal(err)
	}
	reply := make([]byte, 5)
	if _, err := io.ReadFull(c, reply); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", reply)
	fmt.Println("SMC:", c.UsingSMC(), c.Mode())
	// Output:
	// hello
	// SMC: true SMCD
}

// A server accepts connections: an smcloop client gets SMC-D, any other TCP client
// plain TCP on the same listener.
func ExampleListen() {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		got, err := io.ReadAll(c) // until the client closes
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("server read %q, SMC: %v\n", got, c.(*smcloop.Conn).UsingSMC())
	}()

	c, err := smcloop.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	c.Write([]byte("ping"))
	c.Close()
	<-done
	// Output:
	// server read "ping", SMC: true
}

// Config sets a connection's SMC settings: here a fixed 64 KiB receive buffer on the
// client, and a client that turns SMC-D off and so falls back to TCP, with the
// kernel's decline code to say why.
func ExampleConfig() {
	ln, err := (&smcloop.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()

	for _, cfg := range []smcloop.Config{
		{RMem: 64 << 10},
		{DisableSMC: true},
	} {
		d := &smcloop.Dialer{Config: cfg}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			log.Fatal(err)
		}
		c.Write([]byte("x"))
		io.ReadFull(c, make([]byte, 1))
		if c.UsingSMC() {
			fmt.Println("SMC-D, receive buffer", c.Stats().RMBSize, "bytes")
		} else {
			local, peer := c.FallbackReason()
			fmt.Printf("TCP, declined locally with %s (%#08x), peer code %#x\n", clc.CodeName(local), local, peer)
		}
		c.Close()
	}
	// Output:
	// SMC-D, receive buffer 65536 bytes
	// TCP, declined locally with NOSMCDEV (0x03030000), peer code 0x0
}

// SetCork holds writes back, as TCP_CORK does: the three writes reach the peer in one
// publication, made by clearing the cork.
func ExampleConn_SetCork() {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	received := make(chan []byte)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		got, _ := io.ReadAll(c)
		received <- got
	}()

	c, err := smcloop.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	c.SetCork(true)
	for _, part := range []string{"HTTP/1.1 200 OK\r\n", "Content-Length: 2\r\n\r\n", "ok"} {
		c.Write([]byte(part))
	}
	c.SetCork(false) // publishes the pending bytes now
	s := c.Stats()
	c.Close()

	fmt.Printf("%q\n", <-received)
	fmt.Printf("pushes %d, by uncorking %d, bytes %d\n", s.Pushes, s.CorkPushes, s.SMCBytesSent)
	// Output:
	// "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	// pushes 1, by uncorking 1, bytes 40
}

// ReadFrom sends a file the way sendfile does: io.Copy from an *os.File to a Conn
// copies the file's pages straight into the peer's receive buffer.
func ExampleConn_ReadFrom() {
	f, err := os.CreateTemp("", "smcloop-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	content := strings.Repeat("0123456789abcdef", 16<<10) // 256 KiB
	if _, err := f.WriteString(content); err != nil {
		log.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		log.Fatal(err)
	}

	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	received := make(chan []byte)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		got, _ := io.ReadAll(c)
		received <- got
	}()

	c, err := smcloop.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	n, err := c.ReadFrom(f) // io.Copy(c, f) calls it too
	if err != nil {
		log.Fatal(err)
	}
	sendfiles := c.Stats().SendfileCalls
	c.Close()

	got := <-received
	fmt.Println("sent", n, "bytes; sendfile calls:", sendfiles)
	fmt.Println("received", len(got), "bytes, same as the file:", bytes.Equal(got, []byte(content)))
	// Output:
	// sent 262144 bytes; sendfile calls: 1
	// received 262144 bytes, same as the file: true
}

// Stats counts what went where: on an SMC-D connection the application bytes go
// through shared memory and the TCP connection carries only the handshake.
func ExampleConn_Stats() {
	addr := echoServer()
	c, err := smcloop.Dial("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	msg := []byte("twelve bytes")
	c.Write(msg)
	io.ReadFull(c, make([]byte, len(msg)))

	s := c.Stats()
	fmt.Println("SMC:", s.SMC)
	fmt.Println("shared memory: sent", s.SMCBytesSent, "received", s.SMCBytesRecv)
	fmt.Println("TCP after the handshake: sent", s.TCPBytesSent, "received", s.TCPBytesRecv)
	fmt.Println("handshake bytes exchanged:", s.CLCBytesSent > 0 && s.CLCBytesRecv > 0)
	// Output:
	// SMC: true
	// shared memory: sent 12 received 12
	// TCP after the handshake: sent 0 received 0
	// handshake bytes exchanged: true
}

// A writer fills the peer's buffer in place and a reader checks the bytes where they lie:
// no copy on either side beyond the writer's own filling. A large message takes several
// reservations (each at most one autosplit segment, 32 KiB by default), and the reader
// leases what has arrived, span by span.
func ExampleConn_Reserve() {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	const size = 100 << 10
	sum := make(chan int, 1)
	go func() { // the reader: adds up the bytes in place
		c, err := ln.AcceptSMC()
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		total := 0
		for got := 0; got < size; {
			l, err := c.Lease()
			if err != nil {
				log.Fatal(err)
			}
			for _, b := range l.Bytes() {
				total += int(b)
			}
			got += len(l.Bytes())
			if err := l.Release(len(l.Bytes())); err != nil {
				log.Fatal(err)
			}
		}
		sum <- total
	}()

	c, err := smcloop.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	reservations := 0
	for left := size; left > 0; {
		res, err := c.Reserve(left)
		if err != nil {
			log.Fatal(err)
		}
		buf := res.Bytes()
		for i := range buf {
			buf[i] = 1 // build the message in place
		}
		if err := res.Commit(len(buf)); err != nil {
			log.Fatal(err)
		}
		left -= len(buf)
		reservations++
	}
	fmt.Println("sum", <-sum, "in at least", size/(32<<10), "reservations:", reservations >= size/(32<<10))
	// Output: sum 102400 in at least 3 reservations: true
}
