package command

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/smcloop/smcloop/internal/bench"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// TestMain makes the test binary a server child when the bench command re-executes it
// as ServerName, as the programs that share the command do.
func TestMain(m *testing.M) {
	bench.RegisterBuiltins()
	if len(os.Args) > 1 && os.Args[1] == "server" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		err := testApp(os.Stdout, os.Stderr).RunContext(ctx, append([]string{"smcloop"}, os.Args[1:]...))
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == ServerName {
		if err := bench.ServeChild(context.Background(), os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// A binary built with -race sleeps a second before exiting unless told not to.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	os.Exit(m.Run())
}

func testApp(stdout io.Writer, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "smcloop",
		Writer:    stdout,
		ErrWriter: stderr,
		Commands: []*cli.Command{Bench(Options{Program: "smcloop", SlowHandshake: time.Second}), Server(),
			Serve(), Client(Options{Program: "smcloop"})},
	}
}

// runPiped runs the bench command with args, stderr going to a pipe, and returns what
// it printed on stdout and on stderr.
func runPiped(t *testing.T, args ...string) (stdout, stderr string) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	var out bytes.Buffer
	runErr := testApp(&out, w).RunContext(context.Background(), append([]string{"smcloop", "bench"}, args...))
	require.NoError(t, w.Close())
	errOut, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, runErr)
	return out.String(), string(errOut)
}

// TestBenchPlot runs a short benchmark with --plot, --json and stderr piped: the charts
// are a valid PNG and SVG, the tables carry the CPU columns, and no progress line is
// written to the pipe.
func TestBenchPlot(t *testing.T) {
	dir := t.TempDir()
	short := []string{"-t", "tcp,unix", "--duration", "30ms", "--warmup", "10ms"}

	pngPath, jsonPath := filepath.Join(dir, "bench.png"), filepath.Join(dir, "bench.json")
	out, errOut := runPiped(t, append(short, "--lat-sizes", "14,1K", "--bw-sizes", "1K,16K",
		"--plot", pngPath, "--json", jsonPath)...)
	assert.Empty(t, errOut, "stderr is a pipe: no progress line")
	for _, title := range []string{"PING-PONG LATENCY", "STREAM THROUGHPUT"} {
		assert.Contains(t, out, "\n"+title+" ")
	}
	// The titles' spacing follows the widest figure measured, so any run of two spaces or
	// more separates them.
	for _, cols := range [][]string{{"vs floor", "cpu/rt", "cores", "cpu vs tcp"}, {"of copy\\(\\)", "cpu/msg", "cores", "cpu vs tcp"}} {
		assert.Regexp(t, `(?m) {2,}`+strings.Join(cols, ` {2,}`)+`$`, out)
	}
	b, err := os.ReadFile(pngPath)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")), "PNG header")
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	assert.Equal(t, 2*7*96, img.Bounds().Dx())

	js, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	res, err := bench.ReadJSON(bytes.NewReader(js))
	require.NoError(t, err)
	require.Len(t, res.Latency, 2)
	require.Len(t, res.Stream, 2)
	for _, p := range res.Latency {
		for _, r := range p.Results {
			require.NotNil(t, r.CPU, "ping-pong %d %s", p.Size, r.Transport)
			assert.Positive(t, r.CPU.PerOpNS)
		}
	}
	var raw map[string]any
	require.NoError(t, json.Unmarshal(js, &raw))

	svgPath := filepath.Join(dir, "bench.svg")
	_, errOut = runPiped(t, append(short, "--mode", "lat", "--lat-sizes", "14", "--plot", svgPath)...)
	assert.Empty(t, errOut)
	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(svg), "<?xml"))
	assert.Contains(t, string(svg), "<svg")
	assert.Contains(t, string(svg), "Ping-pong round trip (p50)")
	assert.NotContains(t, string(svg), "Stream bandwidth")
}

func TestBenchPlotRefusesFormat(t *testing.T) {
	var out, errOut bytes.Buffer
	err := testApp(&out, &errOut).RunContext(context.Background(),
		[]string{"smcloop", "bench", "-t", "tcp", "--plot", filepath.Join(t.TempDir(), "x.gif")})
	require.ErrorContains(t, err, `--plot: plot file`)
	assert.ErrorContains(t, err, "want a .png or .svg name")
	assert.Empty(t, out.String(), "refused before measuring")
}

// TestProgressQuietUnlessTerminal writes progress to a pipe, a buffer and /dev/null,
// which get nothing, and to a pseudo-terminal, which gets the status line.
func TestProgressQuietUnlessTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer devNull.Close()
	var buf bytes.Buffer
	for _, dst := range []io.Writer{w, &buf, devNull} {
		p := NewProgress(dst, time.Second)
		p.Show(1, 2, "ping-pong 14, tcp, round 1 of 1")
		p.Clear()
	}
	require.NoError(t, w.Close())
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Empty(t, got, "pipe")
	assert.Empty(t, buf.Bytes(), "buffer")

	ptmx, tty := openPTY(t)
	p := NewProgress(tty, 2*time.Second)
	p.Show(3, 4, "stream 64K, smcd, round 2 of 2")
	p.Clear()
	q := NewProgress(tty, 0)
	q.Show(1, 4, "connections, tcp, round 1 of 1")
	want := "\r\033[K[3/4] stream 64K, smcd, round 2 of 2 (about 4s left)" + "\r\033[K" +
		"\r\033[K[1/4] connections, tcp, round 1 of 1"
	require.NoError(t, ptmx.SetReadDeadline(time.Now().Add(10*time.Second)))
	read := make([]byte, len(want))
	_, err = io.ReadFull(ptmx, read)
	require.NoError(t, err)
	assert.Equal(t, want, string(read))
}

// TestServerAndClient runs "smcloop server" as a separate process and "smcloop client"
// against it, over tcp on a given port and over unix on a given path: the client gets
// its figures, the server logs each connection and exits cleanly when interrupted.
func TestServerAndClient(t *testing.T) {
	for _, tt := range []struct{ transport, listen string }{
		{"tcp", "127.0.0.1:0"},
		{"unix", filepath.Join(t.TempDir(), "bench.sock")},
	} {
		t.Run(tt.transport, func(t *testing.T) {
			srv := exec.Command(os.Args[0], "server", "--listen", tt.listen, "-t", tt.transport)
			stdout, err := srv.StdoutPipe()
			require.NoError(t, err)
			var srvErr bytes.Buffer
			srv.Stderr = &srvErr
			require.NoError(t, srv.Start())
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				srv.Process.Kill()
				srv.Wait()
				t.Fatalf("server: %v: %s", err, srvErr.String())
			}
			m := regexp.MustCompile(`^listening on (\S+) \(` + tt.transport + `\)\n$`).FindStringSubmatch(line)
			require.Len(t, m, 2, "server said %q", line)
			if tt.transport == "unix" {
				assert.Equal(t, tt.listen, m[1])
			}

			jsonPath := filepath.Join(t.TempDir(), "client.json")
			out, errOut := runClientPiped(t, m[1], "-t", tt.transport, "--lat-sizes", "14", "--bw-sizes", "1K",
				"--duration", "30ms", "--warmup", "10ms", "--json", jsonPath)
			assert.Empty(t, errOut)
			assert.Contains(t, out, "\n  method    client and server are separate processes, the server started on its own at "+m[1]+";\n")

			require.NoError(t, srv.Process.Signal(os.Interrupt))
			require.NoError(t, srv.Wait(), "server stderr: %s", srvErr.String())
			logged := strings.Split(strings.TrimSuffix(srvErr.String(), "\n"), "\n")
			require.Len(t, logged, 2, "server stderr: %s", srvErr.String())
			assert.Regexp(t, `^connection 1 from \S*: `+tt.transport+` ping-pong 14, [1-9][0-9]* messages verified in `, logged[0])
			assert.Regexp(t, `^connection 2 from \S*: `+tt.transport+` stream 1K, [1-9][0-9]* messages verified in `, logged[1])

			js, err := os.ReadFile(jsonPath)
			require.NoError(t, err)
			res, err := bench.ReadJSON(bytes.NewReader(js))
			require.NoError(t, err)
			assert.Equal(t, m[1], res.Settings.Server)
			require.Len(t, res.Latency, 1)
			require.Len(t, res.Stream, 1)
			assert.Positive(t, res.Latency[0].Results[0].Samples)
			require.NotNil(t, res.Latency[0].Results[0].CPU)
			assert.Positive(t, res.Latency[0].Results[0].CPU.ServerUserNS+res.Latency[0].Results[0].CPU.ServerSysNS)
			assert.Equal(t, res.Stream[0].Results[0].MessagesSent, res.Stream[0].Results[0].MessagesReceived)
		})
	}
}

// runClientPiped runs the client command with args, stderr going to a pipe.
func runClientPiped(t *testing.T, args ...string) (stdout, stderr string) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	var out bytes.Buffer
	runErr := testApp(&out, w).RunContext(context.Background(), append([]string{"smcloop", "client"}, args...))
	require.NoError(t, w.Close())
	errOut, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, runErr)
	return out.String(), string(errOut)
}

func TestServerRefusesAddressWithoutListenOn(t *testing.T) {
	tr := bench.TCP()
	tr.ListenOn = nil
	_, err := bench.ListenFor(context.Background(), tr, "127.0.0.1:0")
	require.EqualError(t, err, "transport tcp cannot listen on a given address (leave the address out for a fresh one)")
	ln, err := bench.ListenFor(context.Background(), tr, "")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
}
