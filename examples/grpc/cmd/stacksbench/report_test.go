package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/smcloop/smcloop/internal/wakeprobe"
)

// phasesReport is a GET's phases on two transports, with the memory bound's figures.
func phasesReport(w wakeprobe.Result, pinned bool) *Report {
	r := &Report{Transports: []string{"smcloop", "tcp"}, Wakeups: w}
	if pinned {
		r.Pinning = &Pinning{ClientCPU: 0, ServerCPU: 1}
	}
	mem := map[string]float64{"mem_fill_us": 60, "mem_copy_us": 58, "mem_compare_us": 48, "mem_cpus": 2}
	for tr, ph := range map[string][4]float64{"smcloop": {70, 70, 140, 60}, "tcp": {85, 90, 135, 60}} {
		m := map[string]float64{"phase_request_us": ph[0], "phase_response_us": ph[1], "phase_body_us": ph[2], "phase_check_us": ph[3]}
		for k, v := range mem {
			m[k] = v
		}
		r.Summary = append(r.Summary, &Summary{Workload: "http-get-1MiB-1conn", Transport: tr, Median: m})
	}
	return r
}

// TestPhasesTurns: unpinned, where most wake-ups ran on the waker's CPU, the phases
// table adds the bound in which the server's copy and the client's take turns (the body
// as fill + copy), and says why; pinned, or where wake-ups spread, it does not.
func TestPhasesTurns(t *testing.T) {
	get := workloads[slices.IndexFunc(workloads, func(w workload) bool { return w.name == "http-get-1MiB-1conn" })]
	var out strings.Builder
	phasesReport(wakeprobe.Result{Wakeups: 200, OnWaker: 180}, false).writePhases(&out, get)
	assert.Equal(t, `
NET/HTTP GET 1 MiB, 1 CONNECTION, PHASES  medians per request, µs: request = from the client's Do to the server handler's
  start; response = until Do returns with the headers; body = reading the body to its end; check = comparing it

       transport  request  response  body  check  total  reqs/s  vs tcp
         smcloop     70.0      70.0   140   60.0    340    2941   1.09x
             tcp     85.0      90.0   135   60.0    370    2703   1.00x
           bound     70.0      70.0  58.0   48.0    246    4065   1.50x
    bound, turns     70.0      70.0   118   48.0    306    3268   1.21x

  bound: the fastest request and response legs of this run; the body as one copy() into the client's
  buffer of bytes another CPU has just written, the check as one comparison after it (in-process, medians
  of 200): what a transport that cost nothing beyond the copy its reader must make would reach here
  bound, turns: the same with the server's copy of the body into the buffer (60.0 µs) before the client's:
  unpinned, 90% of the wake-ups in the header ran on their waker's busy CPU, so a writer and the reader
  it wakes take turns there rather than copy side by side (-pin gives each its own CPU)
`, out.String())

	for name, r := range map[string]*Report{
		"pinned":       phasesReport(wakeprobe.Result{Wakeups: 200, OnWaker: 180}, true),
		"spread":       phasesReport(wakeprobe.Result{Wakeups: 200, OnWaker: 20}, false),
		"not measured": phasesReport(wakeprobe.Result{Note: "not measured: needs Linux"}, false),
	} {
		out.Reset()
		r.writePhases(&out, get)
		assert.Contains(t, out.String(), "\n        bound     70.0      70.0  58.0   48.0    246    4065   1.50x\n", name)
		assert.NotContains(t, out.String(), "bound, turns", name)
	}
}
