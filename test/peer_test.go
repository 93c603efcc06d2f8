package test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/smcloop/smcloop"
)

// The peer process speaks to the test process in lines: it prints "ADDR <addr>" once
// its listener is up, then reports on stdout ("RESULT {json}", "ECHO {json}",
// "OK <command> ..." or "ERR <command>: <error>") and takes commands on stdin. It never
// outlives its stdin by choice, and the test process kills it at the end of every test
// in any case.

// peerWatchdog bounds every connection of a peer process, so that a peer whose test
// process vanished cannot hang on forever.
const peerWatchdog = 15 * time.Minute

var stdoutMu sync.Mutex

// say prints one line to the test process.
func say(format string, args ...any) {
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func runPeer(role string, args []string) error {
	switch role {
	case "stream":
		return peerStream(args)
	case "echo":
		return peerEcho()
	case "script":
		return peerScript()
	case "interop":
		return peerInterop(args)
	case "httpcount":
		return peerHTTPCount(args)
	case "loadserver":
		return peerLoadServer()
	case "loadclient":
		return peerLoadClient(args)
	case "soakserver":
		return peerSoakServer()
	case "sink":
		return peerSink(args)
	}
	return fmt.Errorf("unknown role %q", role)
}

// peerListen listens on a loopback port and announces it.
func peerListen() (*smcloop.Listener, error) {
	ln, err := smcloop.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	say("ADDR %s", ln.Addr())
	return ln, nil
}

// peerStream accepts one connection and runs the child's half of the bidirectional
// stream: args are the byte count per direction and the seed.
func peerStream(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("want <bytes> <seed>, got %q", args)
	}
	total, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil {
		return err
	}
	seed, err := strconv.ParseUint(args[1], 10, 64)
	if err != nil {
		return err
	}
	ln, err := peerListen()
	if err != nil {
		return err
	}
	c, err := ln.AcceptSMC()
	ln.Close()
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(peerWatchdog))
	res := runStream(c, total, seed, sideChild)
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	say("RESULT %s", b)
	return c.Close()
}

// echoReport is what the echo peer prints when one of its connections ends.
type echoReport struct {
	Bytes    int64
	Err      string
	CloseErr string
	Stats    smcloop.ConnStats
}

// peerEcho echoes every accepted connection until its EOF, then shuts down the writing
// side, closes the connection and reports it. It exits when stdin closes or says "exit".
func peerEcho() error {
	ln, err := peerListen()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := ln.AcceptSMC()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				echo(c)
			}()
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() && sc.Text() != "exit" {
	}
	ln.Close()
	<-acceptDone
	wg.Wait()
	return nil
}

func echo(c *smcloop.Conn) {
	c.SetDeadline(time.Now().Add(peerWatchdog))
	var r echoReport
	buf := make([]byte, 64<<10)
	var err error
	for {
		n, rerr := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				err = werr
				break
			}
			r.Bytes += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	if err == nil {
		err = c.CloseWrite()
	}
	r.Stats = c.Stats()
	if err != nil {
		r.Err = err.Error()
	}
	if cerr := c.Close(); cerr != nil {
		r.CloseErr = cerr.Error()
	}
	b, _ := json.Marshal(r)
	say("ECHO %s", b)
}

// peerScript runs one connection by commands from stdin, one per line, answering each
// with "OK <command> ..." or "ERR <command>: <error>":
//
//	accept            accept the next connection; answers its Stats as JSON
//	write N SEED      write payload(SEED, N); answers the byte count and its SHA-256
//	closewrite        CloseWrite
//	read N            read exactly N bytes; answers N and their SHA-256
//	readall           read until io.EOF; answers the byte count and its SHA-256
//	stats             answers Stats as JSON
//	close             Close
//	exit              exit with status 0
func peerScript() error {
	ln, err := peerListen()
	if err != nil {
		return err
	}
	defer ln.Close()
	s := &script{ln: ln}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "exit" {
			return nil
		}
		reply, err := s.step(f)
		if err != nil {
			say("ERR %s: %v", f[0], err)
			continue
		}
		say("OK %s", strings.TrimSpace(f[0]+" "+reply))
	}
	return nil
}

type script struct {
	ln *smcloop.Listener
	c  *smcloop.Conn
}

func (s *script) step(f []string) (string, error) {
	if f[0] != "accept" && s.c == nil {
		return "", errors.New("no connection accepted")
	}
	num := func(i int) (int, error) {
		if len(f) <= i {
			return 0, fmt.Errorf("missing argument %d", i)
		}
		return strconv.Atoi(f[i])
	}
	switch f[0] {
	case "accept":
		c, err := s.ln.AcceptSMC()
		if err != nil {
			return "", err
		}
		c.SetDeadline(time.Now().Add(peerWatchdog))
		s.c = c
		return statsJSON(c)
	case "stats":
		return statsJSON(s.c)
	case "write":
		n, err := num(1)
		if err != nil {
			return "", err
		}
		if len(f) < 3 {
			return "", errors.New("missing seed")
		}
		seed, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return "", err
		}
		data := payload(seed, n)
		w, err := s.c.Write(data)
		if err != nil {
			return "", fmt.Errorf("wrote %d of %d bytes: %w", w, n, err)
		}
		return fmt.Sprintf("%d %s", w, sha(data)), nil
	case "closewrite":
		return "", s.c.CloseWrite()
	case "read":
		n, err := num(1)
		if err != nil {
			return "", err
		}
		buf := make([]byte, n)
		if r, err := io.ReadFull(s.c, buf); err != nil {
			return "", fmt.Errorf("read %d of %d bytes: %w", r, n, err)
		}
		return fmt.Sprintf("%d %s", n, sha(buf)), nil
	case "readall":
		b, err := io.ReadAll(s.c)
		if err != nil {
			return "", fmt.Errorf("read %d bytes, then: %w", len(b), err)
		}
		return fmt.Sprintf("%d %s", len(b), sha(b)), nil
	case "close":
		return "", s.c.Close()
	}
	return "", fmt.Errorf("unknown command %q", f[0])
}

func statsJSON(c *smcloop.Conn) (string, error) {
	b, err := json.Marshal(c.Stats())
	return string(b), err
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
