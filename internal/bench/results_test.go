package bench

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleResults() *Results {
	return &Results{
		Schema:  Schema,
		Date:    time.Date(2026, 3, 1, 12, 34, 56, 0, time.UTC),
		Command: []string{"smcloop", "bench", "--lat-sizes", "1:64K:*2"},
		Machine: Machine{Hostname: "vm", NumCPU: 2, GOMAXPROCS: 2, GOOS: "linux", GOARCH: "amd64",
			GoVersion: "go1.26.8", Kernel: "6.18.44", CPUModel: "AMD EPYC"},
		Settings: Settings{Transports: []string{"smcd", "tcp"}, Baseline: "tcp", LatSizes: []int{14},
			BWSizes: []int{64000}, DurationNS: 1e9, WarmupNS: 2e8, Rounds: 2, Pinned: true, ClientCPU: 0, ServerCPU: 1},
		Floors: Floors{CacheLineRTTNS: 123.5, CacheLineNote: "two threads pinned to CPUs 0 and 1",
			Copy: []CopyFloor{{Size: 14, BytesPerSec: 3.5e9, NSPerCopy: 4.0}, {Size: 64000, BytesPerSec: 2.5e10, NSPerCopy: 2560}}},
		Latency: []LatencyPoint{{Size: 14, FloorNS: 131.5, Results: []LatencyResult{
			{Transport: "smcd", LatencyStats: LatencyStats{Samples: 150000, ElapsedNS: 2e9, MinNS: 9000, MeanNS: 13200.25,
				P50NS: 12800, P90NS: 14000, P99NS: 20100, P999NS: 40300, MaxNS: 900000},
				Rounds: []LatencyStats{{Samples: 75000, P50NS: 12700}, {Samples: 75000, P50NS: 12900}}},
			{Transport: "tcp", LatencyStats: LatencyStats{Samples: 70000, ElapsedNS: 2e9, MinNS: 20000, MeanNS: 28000.5,
				P50NS: 25600, P90NS: 30000, P99NS: 40000, P999NS: 80000, MaxNS: 1200000},
				Rounds: []LatencyStats{{Samples: 35000, P50NS: 25000}, {Samples: 35000, P50NS: 26200}}},
		}}},
		Stream: []StreamPoint{{Size: 64000, CopyBytesPerSec: 2.5e10, Results: []StreamResult{
			{Transport: "smcd", StreamStats: StreamStats{BytesPerSec: 5e9, MsgsPerSec: 78125, WindowBytes: 1e10, WindowNS: 2e9,
				MessagesSent: 200000, BytesSent: 12800000000, MessagesReceived: 200000, BytesReceived: 12800000000, SenderBytesPerSec: 5.1e9},
				Rounds: []StreamStats{{BytesPerSec: 4.9e9}, {BytesPerSec: 5.1e9}}},
			{Transport: "tcp", StreamStats: StreamStats{BytesPerSec: 2.5e9, MsgsPerSec: 39062.5, WindowBytes: 5e9, WindowNS: 2e9,
				MessagesSent: 100000, BytesSent: 6400000000, MessagesReceived: 100000, BytesReceived: 6400000000, SenderBytesPerSec: 2.6e9},
				Rounds: []StreamStats{{BytesPerSec: 2.5e9}, {BytesPerSec: 2.5e9}}},
		}}},
	}
}

func TestJSONRoundTrip(t *testing.T) {
	want := sampleResults()
	var buf bytes.Buffer
	if err := want.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip changed the results:\n got %+v\nwant %+v", got, want)
	}
	for _, key := range []string{`"schema": "smcloop-bench/1"`, `"p999_ns": 40300`, `"nproc": 2`, `"kernel": "6.18.44"`,
		`"bytes_received": 12800000000`, `"date": "2026-03-01T12:34:56Z"`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
	if _, err := ReadJSON(strings.NewReader(`{"schema": "other/1"}`)); err == nil {
		t.Error("ReadJSON accepted another schema")
	}
}

func TestWriteText(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleResults().WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"command   smcloop bench --lat-sizes '1:64K:*2'",
		"client on CPU 0, server on CPU 1 (sched_setaffinity)",
		"  14 B  smcd       12.80  20.10  40.30  13.20  150,000       ±0.8%   0.50x     97.3x",
		"        tcp        25.60  40.00  80.00  28.00   70,000       ±2.3%   1.00x      195x",
		"        floor      0.132",
		"  64000 B  smcd        5,000.0   78,125   ±2.0%   2.00x      20.0%",
		"           copy()     25,000.0  390,625",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("text lacks line %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "WARNING") {
		t.Errorf("warning without cause:\n%s", out)
	}

	disturbed := sampleResults()
	disturbed.Floors.CacheLineRTTNS = 20000
	disturbed.Latency[0].FloorNS = 20008
	buf.Reset()
	if err := disturbed.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "WARNING: a transport beat a floor") {
		t.Errorf("no warning for a floor above a p50:\n%s", buf.String())
	}
}
