package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
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
	ClientCPU  int      `json:"client_cpu"` // -1 when not pinned
	ServerCPU  int      `json:"server_cpu"` // -1 when not pinned
}

// Floors are in-process bounds for any transport on this machine.
type Floors struct {
	// CacheLineRTTNS is the round trip of one cache line between two threads spinning on
	// an atomic word (the smallest possible shared-memory ping-pong); 0 if not measured.
	CacheLineRTTNS float64 `json:"cacheline_rtt_ns"`
	// CacheLineNote says where the two threads ran, or why the round trip was not measured.
	CacheLineNote string      `json:"cacheline_note"`
	Copy          []CopyFloor `json:"copy"`
}

// CopyFloor is the speed of copy() of Size bytes between two buffers, in a loop.
type CopyFloor struct {
	Size        int     `json:"size"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	NSPerCopy   float64 `json:"ns_per_copy"`
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
	CopyBytesPerSec float64        `json:"copy_bytes_per_sec"`
	Results         []StreamResult `json:"results"`
}

// StreamResult is one transport at one size: all rounds together, then each round.
type StreamResult struct {
	Transport string `json:"transport"`
	StreamStats
	Rounds []StreamStats `json:"rounds"`
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
