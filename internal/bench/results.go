package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/smcloop/smcloop/internal/wakeprobe"
)

// Schema names the layout of the JSON that WriteJSON produces; it changes when a field
// changes meaning.
const Schema = "smcloop-bench/1"

// Results is everything one Run measured. All durations are nanoseconds, rates are per
// second, MB means 10^6 bytes.
type Results struct {
	Schema   string         `json:"schema"`
	Date     time.Time      `json:"date"`
	Command  []string       `json:"command,omitempty"`
	Machine  Machine        `json:"machine"`
	Settings Settings       `json:"settings"`
	Floors   Floors         `json:"floors"`
	Latency  []LatencyPoint `json:"latency,omitempty"`
	Stream   []StreamPoint  `json:"stream,omitempty"`
	Conns    *ConnPoint     `json:"conns,omitempty"`
	Overload *OverloadPoint `json:"overload,omitempty"`
	HTTP     *HTTPPoint     `json:"http,omitempty"`
}

// Machine describes where the run took place.
type Machine struct {
	Hostname   string `json:"hostname"`
	NumCPU     int    `json:"nproc"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	GoVersion  string `json:"go_version"`
	Kernel     string `json:"kernel,omitempty"`
	CPUModel   string `json:"cpu_model,omitempty"`
}

// Placement sums up the checks of a pinned run: after every measurement, this process
// checked that all its threads were on the client's CPU alone, and the server child, before
// it exited, that all its threads were on the server's. A check that fails ends the run.
type Placement struct {
	Checks int `json:"checks"`
	// ClientThreads and ServerThreads are the fewest threads one check found.
	ClientThreads int `json:"client_threads"`
	ServerThreads int `json:"server_threads"`
}

// Settings records how the run was made.
type Settings struct {
	Transports []string `json:"transports"`
	Baseline   string   `json:"baseline"`
	LatSizes   []int    `json:"lat_sizes,omitempty"`
	BWSizes    []int    `json:"bw_sizes,omitempty"`
	DurationNS int64    `json:"duration_ns"`
	WarmupNS   int64    `json:"warmup_ns"`
	Rounds     int      `json:"rounds"`
	Pinned     bool     `json:"pinned"`
	// Busy is the number of busy neighbours that ran beside the measurements (Config.Busy).
	Busy      int `json:"busy,omitempty"`
	ClientCPU int `json:"client_cpu"` // -1 when not pinned
	ServerCPU int `json:"server_cpu"` // -1 when not pinned
	// Placement is what the checks of a pinned run's placement found (nil unpinned).
	Placement *Placement `json:"placement,omitempty"`
	// Preset names the preset the run was made with, if any.
	Preset string `json:"preset,omitempty"`
	// Compare pairs the transports of the comparison tables, if any.
	Compare *Comparison `json:"compare,omitempty"`
	// Descriptions describe the measured transports' settings, by name.
	Descriptions map[string]string `json:"descriptions,omitempty"`
	// Server is the address of the server started on its own that was measured
	// against, if any (else a fresh server child served each measurement).
	Server string `json:"server,omitempty"`
	// ServerHost is the control address of the bench host on another host whose server
	// children were measured against, if any; Note then says what the timings mean.
	ServerHost string `json:"server_host,omitempty"`
	Note       string `json:"note,omitempty"`
}

// EmulatedNote is the Note of every run between two hosts, in its settings and the
// report's header: the two hosts may be User-Mode Linux instances with soft-RoCE, whose
// figures say that the transport works, not how fast it is.
const EmulatedNote = "on UML or any emulated RDMA (soft-RoCE, rxe) these timings are functional, not performance figures"

// Comparison pairs two transports that differ in one feature, so that the tables show
// what the feature gains, in percentage columns.
type Comparison struct {
	Feature string `json:"feature"` // "autocork", "autosplit", "sendfile+cork"
	With    string `json:"with"`    // the transport (or HTTP server) with the feature
	Without string `json:"without"` // the same without it
}

// Floors are in-process bounds for any transport on this machine.
type Floors struct {
	// CacheLineRTTNS is the round trip of one cache line between two threads spinning on
	// an atomic word (the smallest possible shared-memory ping-pong); 0 if not measured.
	CacheLineRTTNS float64 `json:"cacheline_rtt_ns"`
	// CacheLineNote says where the two threads ran, or why the round trip was not measured.
	CacheLineNote string      `json:"cacheline_note"`
	Copy          []CopyFloor `json:"copy"`
	// Pipe is, for each stream size, the fastest stream through a ring between two
	// threads that copy every byte in and out and check it (pipeFloor).
	Pipe []PipeFloor `json:"pipe,omitempty"`
	// Wakeups is where the scheduler ran a thread of this process that another woke
	// while it kept its CPU busy, and how soon (internal/wakeprobe): whether an unpinned
	// client and server that wake each other run side by side or take turns on one CPU.
	Wakeups wakeprobe.Result `json:"wakeups"`
}

// CopyFloor is the speed of copy() of Size bytes between two buffers, in a loop.
type CopyFloor struct {
	Size        int     `json:"size"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	NSPerCopy   float64 `json:"ns_per_copy"`
}

// PipeFloor is the fastest stream of Size-byte messages through a ring between two threads,
// every byte copied in and out and checked: the bound of a transport that copies each byte
// in and out, as every net.Conn between two processes does.
type PipeFloor struct {
	Size        int     `json:"size"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	NSPerMsg    float64 `json:"ns_per_msg"`
}

// LatencyPoint holds the ping-pong results for one message size.
type LatencyPoint struct {
	Size int `json:"size"`
	// FloorNS is the cache-line round trip plus one copy() of Size bytes each way.
	FloorNS float64         `json:"floor_ns"`
	Results []LatencyResult `json:"results"`
}

// LatencyResult is one transport at one size: all rounds together, then each round.
type LatencyResult struct {
	Transport string `json:"transport"`
	LatencyStats
	Rounds []LatencyStats `json:"rounds"`
	// ClientSend sums the client's send-path counters over the rounds, for transports
	// that report them.
	ClientSend *SendStats `json:"client_send,omitempty"`
	// CPU sums both processes' CPU time over the measured intervals of the rounds;
	// RoundsCPU has each round's.
	CPU       *CPUStats  `json:"cpu,omitempty"`
	RoundsCPU []CPUStats `json:"rounds_cpu,omitempty"`
	// FellBack counts the rounds that posted no figure because the transport left its
	// own path (ErrFallback), and FallbackError is the first such error.
	FellBack      int    `json:"fell_back,omitempty"`
	FallbackError string `json:"fallback_error,omitempty"`
}

// LatencyStats summarises round-trip times measured after the warm-up.
type LatencyStats struct {
	Samples   uint64  `json:"samples"`
	ElapsedNS int64   `json:"elapsed_ns"`
	MinNS     int64   `json:"min_ns"`
	MeanNS    float64 `json:"mean_ns"`
	P50NS     int64   `json:"p50_ns"`
	P90NS     int64   `json:"p90_ns"`
	P99NS     int64   `json:"p99_ns"`
	P999NS    int64   `json:"p999_ns"`
	MaxNS     int64   `json:"max_ns"`
}

// StreamPoint holds the stream results for one message size.
type StreamPoint struct {
	Size int `json:"size"`
	// CopyBytesPerSec is copy() bandwidth for Size-byte buffers; 0 if not measured.
	CopyBytesPerSec float64 `json:"copy_bytes_per_sec"`
	// PipeBytesPerSec is the two-copy stream's (Floors.Pipe); 0 if not measured.
	PipeBytesPerSec float64        `json:"pipe_bytes_per_sec,omitempty"`
	Results         []StreamResult `json:"results"`
}

// StreamResult is one transport at one size: all rounds together, then each round.
type StreamResult struct {
	Transport string `json:"transport"`
	StreamStats
	Rounds []StreamStats `json:"rounds"`
	// ClientSend sums the sender's (the client's) send-path counters over the rounds,
	// for transports that report them.
	ClientSend *SendStats `json:"client_send,omitempty"`
	// FellBack and FallbackError are as in LatencyResult.
	FellBack      int    `json:"fell_back,omitempty"`
	FallbackError string `json:"fallback_error,omitempty"`
}

// StreamStats is one stream measurement. Rates are measured at the receiver over its
// window (which starts after the warm-up and ends with the last data byte); the totals
// include the warm-up and are checked equal on both sides.
type StreamStats struct {
	BytesPerSec      float64 `json:"bytes_per_sec"`
	MsgsPerSec       float64 `json:"msgs_per_sec"`
	WindowBytes      uint64  `json:"window_bytes"`
	WindowNS         int64   `json:"window_ns"`
	MessagesSent     uint64  `json:"messages_sent"`
	BytesSent        uint64  `json:"bytes_sent"`
	MessagesReceived uint64  `json:"messages_received"`
	BytesReceived    uint64  `json:"bytes_received"`
	// SenderBytesPerSec is what the client wrote per second of its own send loop.
	SenderBytesPerSec float64 `json:"sender_bytes_per_sec"`
	// CPU is both processes' CPU time over the measured interval: the client's from the
	// end of its warm-up to its last message, the receiver's over its window.
	CPU *CPUStats `json:"cpu,omitempty"`
}

// ConnPoint holds the short-lived connection results: every connection is dial, one
// request, one answer, and close, the server closing first.
type ConnPoint struct {
	// Conns connections are measured per transport and round, after Warmup unmeasured
	// ones; Concurrency are in progress at once.
	Conns       int `json:"conns"`
	Warmup      int `json:"warmup"`
	Concurrency int `json:"concurrency"`
	// RequestSize is the size of the request and of the answer.
	RequestSize int `json:"request_size"`
	// LimitNS bounds each transport's round; ConnTimeoutNS each connection.
	LimitNS       int64        `json:"limit_ns"`
	ConnTimeoutNS int64        `json:"conn_timeout_ns"`
	Baseline      string       `json:"baseline"`
	Results       []ConnResult `json:"results"`
}

// ConnResult is one transport: all rounds together, then each round.
type ConnResult struct {
	Transport string `json:"transport"`
	ConnStats
	Rounds []ConnStats `json:"rounds"`
}

// ConnStats counts the connections of one measurement. The counts cover every
// connection, warm-up included; the rate and the times cover the measured ones.
type ConnStats struct {
	Attempted uint64 `json:"attempted"`
	Succeeded uint64 `json:"succeeded"`
	// Failed is the sum of the failures by kind: the dial failed, I/O failed or the
	// server closed early, a payload byte arrived wrong, or the time limit cut the
	// connection off.
	Failed         uint64 `json:"failed"`
	FailedDial     uint64 `json:"failed_dial"`
	FailedIO       uint64 `json:"failed_io"`
	FailedMismatch uint64 `json:"failed_mismatch"`
	TimedOut       uint64 `json:"timed_out"`
	// Skipped connections were not started before the time limit.
	Skipped uint64 `json:"skipped"`
	// SMC and Fallback split the dialed connections by what the client saw, for
	// transports that can fall back (ModeKnown).
	ModeKnown bool   `json:"mode_known"`
	SMC       uint64 `json:"smc"`
	Fallback  uint64 `json:"fallback"`
	// FallbackModes counts the connections that fell back by their mode, which names
	// the reasons (smcss's Mode column: "TCP 0x03010000/0x00000000 (...)").
	FallbackModes map[string]uint64 `json:"fallback_modes,omitempty"`
	Errors        []string          `json:"errors,omitempty"` // the first few failures
	// ElapsedNS is the wall time of the measured connections; ConnsPerSec counts the
	// successful ones in it; Time is the time of each, from the start of the dial to the
	// end of the close.
	ElapsedNS   int64        `json:"elapsed_ns"`
	ConnsPerSec float64      `json:"conns_per_sec"`
	Time        LatencyStats `json:"time"`
	// Server is what the server child counted (not in the overload mode's client rows).
	Server *ServerConnStats `json:"server,omitempty"`
	// CPU is both processes' CPU time over the measured connections (the connection
	// mode only); an operation is a connection: one the client completed, one the
	// server answered.
	CPU *CPUStats `json:"cpu,omitempty"`
}

// ServerConnStats is the server child's account of the connections it accepted.
type ServerConnStats struct {
	Served uint64 `json:"served"` // requests verified and answered
	Idle   uint64 `json:"idle"`   // closed by the client before sending anything
	Failed uint64 `json:"failed"` // I/O errors, short or corrupt requests
	// Cut are connections still open when the server stopped; they are closed and
	// counted in Failed too.
	Cut    uint64   `json:"cut"`
	Errors []string `json:"errors,omitempty"` // the first few failures
	// Listener holds the listener's counters, read after it closed, for transports
	// that report them.
	Listener *ListenerStats `json:"listener,omitempty"`
	// PeakHandshaking and PeakPending are the largest handshakes-in-progress and
	// backlog gauges of the listener seen while the connections were measured, sampled
	// every connSampleEvery (PeakSamples readings; 0 if the transport has no counters).
	PeakHandshaking int    `json:"peak_handshaking"`
	PeakPending     int    `json:"peak_pending"`
	PeakSamples     uint64 `json:"peak_samples"`
	// CPUUserNS and CPUSysNS are the server process's CPU time from the start of the
	// measured connections to the end of the service (before its drain), CPUWindowNS
	// that interval and CPUServed the requests answered in it; zero in the overload mode.
	CPUUserNS   int64  `json:"cpu_user_ns,omitempty"`
	CPUSysNS    int64  `json:"cpu_sys_ns,omitempty"`
	CPUWindowNS int64  `json:"cpu_window_ns,omitempty"`
	CPUServed   uint64 `json:"cpu_served,omitempty"`
}

// OverloadPoint holds the overload results (handshake limitation's case): while Stalls
// clients hold handshakes open without ever sending their part, Conns plain TCP clients,
// then Conns clients of the transport itself, connect to the same server, Concurrency at
// a time, each kind for at most LimitNS.
type OverloadPoint struct {
	Stalls      int              `json:"stalls"`
	Conns       int              `json:"conns"`
	Concurrency int              `json:"concurrency"`
	LimitNS     int64            `json:"limit_ns"`
	Baseline    string           `json:"baseline"`
	Results     []OverloadResult `json:"results"`
}

// OverloadResult is one server transport: all rounds together, then each round.
type OverloadResult struct {
	Transport string `json:"transport"`
	OverloadStats
	Rounds []OverloadStats `json:"rounds"`
}

// OverloadStats is one overload measurement.
type OverloadStats struct {
	// StallDials counts the stalling connections made: Stalls at first, and again
	// whenever the server dropped one; StallErrs the ones that could not be made.
	StallDials  uint64   `json:"stall_dials"`
	StallErrs   uint64   `json:"stall_errs"`
	StallErrors []string `json:"stall_errors,omitempty"` // the first few
	// Stalled is the number of handshakes queued or running at the server once the
	// stalls were in place, the fewest over the rounds; -1 if the server does not say.
	Stalled int `json:"stalled"`
	// Plain are plain TCP clients; Native the transport's own clients, for transports
	// that can fall back to TCP (else nil: they would be the same plain clients).
	Plain  ConnStats        `json:"plain"`
	Native *ConnStats       `json:"native,omitempty"`
	Server *ServerConnStats `json:"server,omitempty"`
}

// HTTPPoint holds the HTTP results (as nginx serving a 4 KiB file to wrk -c 100):
// Conns keep-alive clients GET one file of FileSize bytes back to back from each server
// in turn, for the warm-up and then the measured time.
type HTTPPoint struct {
	FileSize int    `json:"file_size"`
	Path     string `json:"path"` // the URL path requested
	Conns    int    `json:"conns"`
	// TimeoutNS is how long after the measured time a request still unanswered is cut
	// off and fails.
	TimeoutNS int64        `json:"timeout_ns"`
	Baseline  string       `json:"baseline"`
	Results   []HTTPResult `json:"results"`
}

// HTTPResult is one server: all rounds together, then each round.
type HTTPResult struct {
	Name      string `json:"name"` // transport:method
	Transport string `json:"transport"`
	Method    string `json:"method"`
	HTTPStats
	Rounds []HTTPStats `json:"rounds"`
}

// HTTPStats is one HTTP measurement. The counts cover every request, warm-up included;
// the rate and the times cover the measured ones.
type HTTPStats struct {
	Requests  uint64 `json:"requests"` // requests started
	Succeeded uint64 `json:"succeeded"`
	// Failed is the sum of the failures by kind: no connection (dial, or a connection
	// that fell back to TCP), I/O (or the request timeout), a status other than 200, a
	// body of the wrong length or with a wrong byte.
	Failed         uint64   `json:"failed"`
	FailedDial     uint64   `json:"failed_dial"`
	FailedIO       uint64   `json:"failed_io"`
	FailedStatus   uint64   `json:"failed_status"`
	FailedMismatch uint64   `json:"failed_mismatch"`
	Errors         []string `json:"errors,omitempty"` // the first few failures
	// Dials counts the connections the client made.
	Dials uint64 `json:"dials"`
	// Measured counts the successful requests started after the warm-up; WindowNS runs
	// from the end of the warm-up to the end of the last of them; Time is the time of
	// each, from sending the request to verifying the body's last byte.
	Measured       uint64       `json:"measured"`
	WindowNS       int64        `json:"window_ns"`
	RequestsPerSec float64      `json:"requests_per_sec"`
	Time           LatencyStats `json:"time"`
	// Server is what the server child counted.
	Server *HTTPServerStats `json:"server,omitempty"`
	// CPU is both processes' CPU time from the end of the warm-up to the end of the
	// requests; an operation is a request: one the client measured, one the server
	// completed.
	CPU *CPUStats `json:"cpu,omitempty"`
}

// HTTPServerStats is the HTTP server child's account.
type HTTPServerStats struct {
	Conns    uint64   `json:"conns"`    // connections accepted
	Requests uint64   `json:"requests"` // responses the handler completed
	Failed   uint64   `json:"failed"`   // requests it could not serve, and server errors
	Errors   []string `json:"errors,omitempty"`
	// ReadFroms counts the response bodies net/http handed to the connection's own
	// ReadFrom (io.ReaderFrom), FileReadFroms those of them read from a file: the
	// sendfile path.
	ReadFroms     uint64 `json:"read_froms"`
	FileReadFroms uint64 `json:"file_read_froms"`
	// Send sums the connections' send-path counters, for transports that report them.
	Send *SendStats `json:"send,omitempty"`
	// CPUUserNS and CPUSysNS are the server process's CPU time from the end of the
	// warm-up to the end of the service, CPUWindowNS that interval and CPUServed the
	// responses completed in it.
	CPUUserNS   int64  `json:"cpu_user_ns,omitempty"`
	CPUSysNS    int64  `json:"cpu_sys_ns,omitempty"`
	CPUWindowNS int64  `json:"cpu_window_ns,omitempty"`
	CPUServed   uint64 `json:"cpu_served,omitempty"`
}

// WriteJSON writes r as indented JSON.
func (r *Results) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads results written by WriteJSON.
func ReadJSON(rd io.Reader) (*Results, error) {
	var r Results
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, err
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("results schema %q, want %q", r.Schema, Schema)
	}
	return &r, nil
}

// FailedRequests counts what makes the HTTP mode unhealthy: requests that failed at the
// client, and requests the server could not serve.
func (r *Results) FailedRequests() uint64 {
	if r.HTTP == nil {
		return 0
	}
	var n uint64
	for _, res := range r.HTTP.Results {
		n += res.Failed
		if res.Server != nil {
			n += res.Server.Failed
		}
	}
	return n
}

// FailedConns counts what makes the connection mode unhealthy: connections that failed
// or were skipped at the client, and connections the server saw fail. The overload mode
// is not counted: failures are part of what it shows.
func (r *Results) FailedConns() uint64 {
	if r.Conns == nil {
		return 0
	}
	var n uint64
	for _, res := range r.Conns.Results {
		n += res.Failed + res.Skipped
		if res.Server != nil {
			n += res.Server.Failed
		}
	}
	return n
}
