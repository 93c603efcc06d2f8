package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/smcloop/smcloop/internal/cpupin"
)

// The server child is started with these arguments (after whatever the ServerCmd puts in
// front, such as a subcommand name):
//
//	--transport NAME  the registered transport to listen with
//	--cpu N           pin every thread of the process to CPU N first
//	--lifeline        exit when stdin reaches EOF (the parent closed it or died)
//	--conns           serve short-lived connections until told to stop (see connServer)
//	--http METHOD     serve a file over HTTP by METHOD (sendfile or write) until told to
//	                  stop (see httpFileServer)
//	--file-size N     the size of that file in bytes
//	--listen-ip IP    listen on IP (a fresh port) with the transport's ListenOn instead
//	                  of its Listen: the server of a run between two hosts
//
// On stdout it prints exactly one line "LISTEN <addr>" once it listens, and, if it fails
// after that, one line "FAIL <kind> <text>" where kind is mismatch, protocol, fallback or
// io. It
// serves one connection and exits: status 0 after sending its report, non-zero otherwise.
// With --conns it reads commands from stdin, one a line: "stats" prints "STATS <json>",
// "mark" starts the process's CPU interval and prints "MARK ok", "stop" ends both with
// "REPORT <json>" and status 0. With --http it takes "stop". A child pinned with --cpu
// checks before it exits that every one of its threads is still on that CPU alone, and
// prints "PLACED <threads checked>" (or fails).

// serverArgs builds the child's arguments.
func serverArgs(transport string, cpu int, conns bool) []string {
	args := []string{"--transport", transport, "--lifeline"}
	if cpu >= 0 {
		args = append(args, "--cpu", strconv.Itoa(cpu))
	}
	if conns {
		args = append(args, "--conns")
	}
	return args
}

// ServeChild is the whole life of a server child: it parses args (see above), listens with
// the named registered transport, announces the address on stdout, serves one benchmark
// connection and returns. The returned error is also reported on stdout as a FAIL line
// once the LISTEN line has been written. With --lifeline, a goroutine reads stdin until
// EOF and then cancels the server; it ends with the process.
func ServeChild(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	sa, err := ParseServerArgs(args)
	if err != nil {
		return err
	}
	if sa.Busy {
		return busyChild(stdin, stdout)
	}
	tr, _ := Lookup(sa.Transport) // ParseServerArgs found it
	if sa.CPU >= 0 {
		if _, err := cpupin.Process(sa.CPU); err != nil {
			return fmt.Errorf("bench server: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var files *httpFileServer
	if sa.HTTP != "" {
		// The file is on disk before the client can connect.
		if files, err = newHTTPFileServer(tr, sa.HTTP, sa.FileSize); err != nil {
			return fmt.Errorf("bench server: %w", err)
		}
		defer files.remove()
	}
	var cmds chan string
	switch {
	case sa.Conns || files != nil:
		cmds = make(chan string)
		go func() {
			sc := bufio.NewScanner(stdin)
			for sc.Scan() {
				select {
				case cmds <- sc.Text():
				case <-ctx.Done():
					return
				}
			}
			if sa.Lifeline {
				cancel()
			}
			close(cmds)
		}()
	case sa.Lifeline:
		go func() {
			io.Copy(io.Discard, stdin)
			cancel()
		}()
	}

	var ln net.Listener
	if sa.ListenIP != "" {
		ln, err = tr.ListenOn(ctx, net.JoinHostPort(sa.ListenIP, "0"))
		if err == nil && ln.Addr().Network() != "tcp" {
			ln.Close()
			err = fmt.Errorf("--listen-ip: the transport listens on %s, not TCP: it cannot serve another host", ln.Addr().Network())
		}
	} else {
		ln, err = tr.Listen(ctx)
	}
	if err != nil {
		return fmt.Errorf("bench server: %s: listen: %w", tr.Name, err)
	}
	if _, err := fmt.Fprintf(stdout, "LISTEN %s\n", ln.Addr()); err != nil {
		ln.Close()
		return fmt.Errorf("bench server: announcing the address: %w", err)
	}
	switch {
	case sa.Conns:
		err = serveConns(ctx, tr, ln, cmds, stdout)
	case files != nil:
		err = files.serve(ctx, ln, cmds, stdout)
	default:
		err = serveOne(ctx, ln, tr.ZeroCopy)
	}
	if err == nil && sa.CPU >= 0 {
		// Every thread the child ran on, the ones the runtime started while it served
		// included, must still be on its CPU: the figures are of a pinned server.
		var n int
		if n, err = cpupin.Placement(sa.CPU); err == nil {
			fmt.Fprintf(stdout, "PLACED %d\n", n)
		} else {
			err = fmt.Errorf("bench server: pinned to CPU %d: %w", sa.CPU, err)
		}
	}
	if err != nil {
		fmt.Fprintf(stdout, "FAIL %s %s\n", failKind(err), strings.ReplaceAll(err.Error(), "\n", " "))
	}
	return err
}

// ServerArgs are a server child's arguments, parsed (see the list above ServeChild).
type ServerArgs struct {
	Transport string // a registered transport
	CPU       int    // -1: not pinned
	Lifeline  bool
	Conns     bool
	HTTP      string // "" unless --http
	FileSize  int
	ListenIP  string // "" unless --listen-ip: then a literal IP address
	Busy      bool   // a busy neighbour (Config.Busy), not a server
}

// ParseServerArgs parses and checks a server child's arguments: known flags only, a
// registered transport, --conns and --http not both, and for --listen-ip an IP address
// and a transport that can listen on a given address (ListenOn). A process that starts
// server children for others (a bench host) checks what it is sent with it before it
// starts one.
func ParseServerArgs(args []string) (ServerArgs, error) {
	fs := flag.NewFlagSet("bench-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var sa ServerArgs
	fs.StringVar(&sa.Transport, "transport", "", "registered transport to listen with")
	fs.IntVar(&sa.CPU, "cpu", -1, "pin the process to this CPU")
	fs.BoolVar(&sa.Lifeline, "lifeline", false, "exit when stdin reaches EOF")
	fs.BoolVar(&sa.Conns, "conns", false, "serve short-lived connections until told to stop")
	fs.StringVar(&sa.HTTP, "http", "", "serve a file over HTTP by this method until told to stop")
	fs.IntVar(&sa.FileSize, "file-size", DefaultHTTPFileSize, "the size of the file the HTTP server serves")
	fs.StringVar(&sa.ListenIP, "listen-ip", "", "listen on this IP address")
	fs.BoolVar(&sa.Busy, "busy", false, "keep one thread busy until stdin reaches EOF (a busy neighbour)")
	if err := fs.Parse(args); err != nil {
		return ServerArgs{}, fmt.Errorf("bench server: %w", err)
	}
	if fs.NArg() > 0 {
		return ServerArgs{}, fmt.Errorf("bench server: unexpected arguments %q", fs.Args())
	}
	if sa.Conns && sa.HTTP != "" {
		return ServerArgs{}, errors.New("bench server: --conns and --http exclude each other")
	}
	if sa.Busy {
		if sa.Transport != "" || sa.CPU >= 0 || sa.Conns || sa.HTTP != "" || sa.ListenIP != "" || !sa.Lifeline {
			return ServerArgs{}, errors.New("bench server: --busy takes --lifeline only")
		}
		return sa, nil
	}
	tr, err := Lookup(sa.Transport)
	if err != nil {
		return ServerArgs{}, fmt.Errorf("bench server: %w", err)
	}
	if sa.ListenIP != "" {
		ip, err := netip.ParseAddr(sa.ListenIP)
		if err != nil {
			return ServerArgs{}, fmt.Errorf("bench server: --listen-ip %q: not an IP address", sa.ListenIP)
		}
		if tr.ListenOn == nil {
			return ServerArgs{}, fmt.Errorf("bench server: --listen-ip: transport %s cannot listen on a given address", tr.Name)
		}
		sa.ListenIP = ip.String()
	}
	return sa, nil
}

// serveOne accepts one connection on ln, closes ln, and serves the connection, through
// zc's buffers if it is set.
func serveOne(ctx context.Context, ln net.Listener, zc *ZeroCopy) error {
	stopLn := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stopLn()
	ln.Close()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for the client: %w", context.Cause(ctx))
		}
		return fmt.Errorf("accept: %w", err)
	}
	defer conn.Close()
	stopConn := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopConn()

	_, _, err = serveConn(conn, zc)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", err, context.Cause(ctx))
	}
	return err
}

// serveConns serves short-lived connections on ln until the "stop" command (or the end
// of the commands) and prints the report; ctx ending first is a failure.
func serveConns(ctx context.Context, tr Transport, ln net.Listener, cmds <-chan string, stdout io.Writer) error {
	srv := newConnServer(ln)
	go srv.acceptLoop()
	listenerStats := func() *ListenerStats {
		if tr.ListenerStats == nil {
			return nil
		}
		st := tr.ListenerStats(ln)
		return &st
	}
	var mark *cpuMark // the start of the measured connections, if the client marked it
	var cpu cpuSpan
	for stop := false; !stop; {
		select {
		case <-ctx.Done():
			srv.stop(0)
			return fmt.Errorf("stopped before the client was done: %w", context.Cause(ctx))
		case cmd, ok := <-cmds:
			switch {
			case !ok && ctx.Err() != nil:
				srv.stop(0)
				return fmt.Errorf("stopped before the client was done: %w", context.Cause(ctx))
			case !ok, cmd == "stop":
				stop = true
				if mark != nil {
					cpu = mark.spanSince(srv.served())
				}
			case cmd == "mark":
				m := markCPU(srv.served())
				mark = &m
				if _, err := fmt.Fprintln(stdout, "MARK ok"); err != nil {
					srv.stop(0)
					return fmt.Errorf("answering mark: %w", err)
				}
			case cmd == "stats":
				b, err := json.Marshal(listenerStats())
				if err == nil {
					_, err = fmt.Fprintf(stdout, "STATS %s\n", b)
				}
				if err != nil {
					srv.stop(0)
					return fmt.Errorf("reporting the listener's counters: %w", err)
				}
			default:
				srv.stop(0)
				return fmt.Errorf("%w: unknown command %q", ErrProtocol, cmd)
			}
		}
	}
	st := srv.stop(serverDrain)
	st.Listener = listenerStats()
	if mark != nil {
		st.CPUUserNS, st.CPUSysNS, st.CPUWindowNS, st.CPUServed = int64(cpu.user), int64(cpu.sys), int64(cpu.wall), cpu.ops
	}
	b, err := json.Marshal(st)
	if err == nil {
		_, err = fmt.Fprintf(stdout, "REPORT %s\n", b)
	}
	if err != nil {
		return fmt.Errorf("sending the report: %w", err)
	}
	return nil
}

// serveConn reads the header, prepares, sends the ready message, serves the mode the
// header names (through zc's buffers if it is set) and sends the report.
func serveConn(conn net.Conn, zc *ZeroCopy) (header, report, error) {
	var hb [headerLen]byte
	if _, err := io.ReadFull(conn, hb[:]); err != nil {
		return header{}, report{}, fmt.Errorf("reading the header: %w", err)
	}
	h, err := parseHeader(hb[:])
	if err != nil {
		return header{}, report{}, err
	}
	rep, err := serveSession(conn, zc, h)
	return h, rep, err
}

// serveSession serves the session that header h opened on conn.
func serveSession(conn net.Conn, zc *ZeroCopy, h header) (report, error) {
	pat := newPattern(h.size)
	if _, err := conn.Write(appendReady(nil)); err != nil {
		return report{}, fmt.Errorf("sending the ready message: %w", err)
	}
	ready := time.Now()
	var rep report
	var zw ZeroCopyWriter
	var zr ZeroCopyReader
	var err error
	if zc != nil {
		if zw, zr, err = zc.Open(conn); err != nil {
			return report{}, fmt.Errorf("opening the zero-copy buffers: %w", err)
		}
	}
	switch {
	case h.mode == modePingPong && zc != nil:
		rep, err = pingPongServerZC(zw, zr, pat, ready, h.warmup)
	case h.mode == modePingPong:
		rep, err = pingPongServer(conn, pat, ready, h.warmup)
	case zc != nil:
		rep, err = streamServerZC(zr, zc.Spans, pat, ready, h.warmup)
	default:
		rep, err = streamServer(conn, pat, ready, h.warmup)
	}
	if err != nil {
		return report{}, fmt.Errorf("%s %s: %w", h.mode, FormatSize(h.size), err)
	}
	if _, err := conn.Write(rep.append(nil)); err != nil {
		return report{}, fmt.Errorf("sending the report: %w", err)
	}
	return rep, nil
}

// failKind classifies a server error for the FAIL line.
func failKind(err error) string {
	switch {
	case errors.Is(err, ErrMismatch):
		return "mismatch"
	case errors.Is(err, ErrProtocol):
		return "protocol"
	case errors.Is(err, ErrFallback):
		return "fallback"
	}
	return "io"
}

// ServerError is a failure the server child reported on its FAIL line. It matches
// ErrMismatch, ErrProtocol or ErrFallback (errors.Is) according to its kind.
type ServerError struct {
	Kind string // "mismatch", "protocol", "fallback" or "io"
	Msg  string
}

func (e *ServerError) Error() string { return e.Msg }

// Is matches ErrMismatch, ErrProtocol and ErrFallback by kind.
func (e *ServerError) Is(target error) bool {
	return (target == ErrMismatch && e.Kind == "mismatch") || (target == ErrProtocol && e.Kind == "protocol") ||
		(target == ErrFallback && e.Kind == "fallback")
}

// parsePlaced returns the thread count of the PLACED line in what the child printed
// (the check of a pinned child's placement before it exits), or 0 if there is none.
func parsePlaced(out string) int {
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "PLACED "); ok {
			if n, err := strconv.Atoi(rest); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// parseFail finds the FAIL line in what the child printed after LISTEN.
func parseFail(out string) *ServerError {
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "FAIL ")
		if !ok {
			continue
		}
		kind, msg, _ := strings.Cut(rest, " ")
		return &ServerError{Kind: kind, Msg: msg}
	}
	return nil
}
