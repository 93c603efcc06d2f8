package bench

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func presetOptions(opts []Option) map[string]string {
	m := make(map[string]string)
	for _, o := range opts {
		m[o.Name] = o.Value
	}
	return m
}

func TestPresetExpansion(t *testing.T) {
	require.Equal(t, []string{"autocork", "autosplit", "sendfile"}, PresetNames())
	_, err := LookupPreset("nagle")
	assert.ErrorContains(t, err, "known: autocork, autosplit, sendfile", "unknown preset")

	// Nothing given on the command line: the whole preset.
	p, err := LookupPreset("autocork")
	require.NoError(t, err)
	none := func(string) bool { return false }
	assert.Equal(t, p.Options, p.Expand(none), "Expand with nothing set")
	o := presetOptions(p.Expand(none))
	sizes, err := ParseSizes(o["bw-sizes"])
	require.NoError(t, err, "autocork sizes")
	if assert.Len(t, sizes, 17, "autocork sizes: 1 B .. 64 KiB in 17 steps") {
		assert.Equal(t, [...]int{1, 64 << 10}, [...]int{sizes[0], sizes[16]}, "autocork sizes: 1 B .. 64 KiB")
	}
	assert.Equal(t, [...]string{"bw", "smcd-autocork,smcd,tcp"}, [...]string{o["mode"], o["transports"]}, "autocork mode, transports")
	// 17 sizes, 3 transports: one to two minutes.
	d, _ := time.ParseDuration(o["duration"])
	w, _ := time.ParseDuration(o["warmup"])
	rounds, _ := strconv.Atoi(o["rounds"])
	total := time.Duration(17*3*rounds) * (d + w)
	assert.True(t, total >= 30*time.Second && total <= 100*time.Second, "autocork measures for %v", total)

	// Options given explicitly override the preset's, which keeps its order otherwise.
	set := map[string]bool{"duration": true, "transports": true}
	got := p.Expand(func(name string) bool { return set[name] })
	var names []string
	for _, o := range got {
		names = append(names, o.Name)
	}
	assert.Equal(t, []string{"mode", "bw-sizes", "warmup", "rounds"}, names, "Expand with duration and transports set: %v", got)

	// The comparison holds while both of its transports are measured.
	if c := p.CompareFor([]string{"tcp", "smcd", "smcd-autocork"}); assert.NotNil(t, c, "CompareFor(all)") {
		assert.Equal(t, *p.Compare, *c, "CompareFor(all)")
		assert.NotSame(t, p.Compare, c, "CompareFor(all) returns a copy")
	}
	assert.Nil(t, p.CompareFor([]string{"smcd", "tcp"}), "CompareFor without smcd-autocork")

	as, _ := LookupPreset("autosplit")
	o = presetOptions(as.Options)
	sizes, err = ParseSizes(o["lat-sizes"])
	assert.NoError(t, err, "autosplit sizes")
	assert.Equal(t, []int{128 << 10, 256 << 10, 512 << 10, 1 << 20}, sizes, "autosplit sizes")
	assert.Equal(t, [...]string{"lat", "true", "smcd-1m-split", "smcd-1m-nosplit"},
		[...]string{o["mode"], o["pin"], as.Compare.With, as.Compare.Without}, "autosplit mode, pin, comparison")
	assert.Contains(t, o["transports"], "tcp", "autosplit transports")

	sf, _ := LookupPreset("sendfile")
	o = presetOptions(sf.Options)
	assert.Equal(t, [...]string{"http", "100", "4K"}, [...]string{o["mode"], o["http-conns"], o["http-size"]}, "sendfile mode, connections, size")
	servers := strings.Split(o["transports"], ",")
	assert.Equal(t, DefaultHTTPServers, servers, "sendfile servers")
	assert.NotNil(t, sf.CompareFor(servers), "sendfile comparison %+v", sf.Compare)
	for _, s := range servers {
		_, method, _ := strings.Cut(s, ":")
		assert.Contains(t, []string{HTTPSendfile, HTTPWrite}, method, "server %q", s)
	}
}

func compareResults() *Results {
	r := sampleResults()
	r.Settings.Preset = "autocork"
	r.Settings.Transports = []string{"smcd", "smcd-nocork", "tcp"}
	r.Settings.Compare = &Comparison{Feature: "autocork", With: "smcd", Without: "smcd-nocork"}
	r.Settings.Descriptions = map[string]string{"smcd": "defaults", "smcd-nocork": "autocork off"}
	r.Latency = nil
	r.Stream = []StreamPoint{{Size: 1, CopyBytesPerSec: 4.6e8, Results: []StreamResult{
		{Transport: "smcd", StreamStats: StreamStats{BytesPerSec: 36e6},
			ClientSend: &SendStats{Conns: 1, Writes: 1000, Autocorked: 960, Pushes: 40, DMB: 65536, PeerDMB: 65536}},
		{Transport: "smcd-nocork", StreamStats: StreamStats{BytesPerSec: 18e6},
			ClientSend: &SendStats{Conns: 1, Writes: 1000, Pushes: 1000, DMB: 65536, PeerDMB: 65536}},
		{Transport: "tcp", StreamStats: StreamStats{BytesPerSec: 2e6}},
	}}}
	return r
}

func TestWriteTextCompare(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, compareResults().WriteText(&buf))
	out := buf.String()
	for _, want := range []string{
		"  preset    autocork: seed 001 (autocorking)",
		"  transport smcd         defaults",
		"            smcd-nocork  autocork off",
		"                 MB/s                  vs tcp           autocork",
		"  size  smcd  smcd-nocork  tcp     smcd  smcd-nocork   gain  held  copy()",
		"   1 B  36.0         18.0  2.0  +1,700%        +800%  +100%   96%   460.0",
		"    smcd: 960 of 1,000 writes held back, 40 pushes; DMB 64 KiB, peer's 64 KiB.",
		"    smcd-nocork: 0 of 1,000 writes held back, 1,000 pushes; DMB 64 KiB, peer's 64 KiB.",
	} {
		assert.Contains(t, out, want+"\n")
	}
	assert.NotContains(t, out, "msgs/s", "the plain stream table is there too")

	// Without one of the pair, the plain table.
	r := compareResults()
	r.Stream[0].Results = r.Stream[0].Results[1:]
	buf.Reset()
	require.NoError(t, r.WriteText(&buf))
	assert.Contains(t, buf.String(), "msgs/s", "the plain table without the pair")
	assert.NotContains(t, buf.String(), "gain", "the plain table without the pair")
}

func TestWriteTextLatencyCompare(t *testing.T) {
	r := sampleResults()
	r.Settings.Compare = &Comparison{Feature: "autosplit", With: "smcd", Without: "tcp"}
	r.Latency[0].Results[0].ClientSend = &SendStats{Conns: 2, Writes: 100, AutosplitSegments: 700, DMB: 1 << 20, PeerDMB: 1 << 20}
	var buf bytes.Buffer
	require.NoError(t, r.WriteText(&buf))
	out := buf.String()
	for _, want := range []string{
		"            smcd           tcp      autosplit improvement        smcd",
		"  size    p50   mean    p50   mean     p50           mean  vs tcp  segs/msg  floor",
		"  14 B  12.80  13.20  25.60  28.00  +50.0%         +52.9%  -50.0%       7.0  0.132",
		"    smcd: 700 segments in 100 writes; DMB 1 MiB, peer's 1 MiB.",
	} {
		assert.Contains(t, out, want+"\n")
	}
}

func TestPercentFormats(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{change(36, 2), "+1,700%"},
		{change(1, 2), "-50.0%"},
		{change(0, 2), "-"},
		{improvement(87.278, 129.306), "+32.5%"},
		{improvement(2, 1), "-100.0%"},
		{group("+627"), "+627"},
		{group("-1234567.5"), "-1,234,567.5"},
		{percent0(1, 200), "0.5%"},
		{percent0(96, 100), "96%"},
	} {
		assert.Equal(t, c.want, c.got)
	}
}

// TestWriteTextWaits: a transport that counts its client's waits gets a line saying how
// they ended; one that does not gets none.
func TestWriteTextWaits(t *testing.T) {
	r := sampleResults()
	r.Latency[0].Results[0].ClientSend = &SendStats{Conns: 1, ReadWaits: 2000, ReadSpinHits: 1990, ReadShortSleeps: 8, ReadDoorbells: 2}
	var buf bytes.Buffer
	require.NoError(t, r.WriteText(&buf))
	out := buf.String()
	assert.Contains(t, out, "\n  client's waits for the answer (whole connection, warm-up included), by how they ended:\n")
	assert.Regexp(t, `\n +size  transport +waits +spin +short sleep +doorbell\n`, out)
	assert.Regexp(t, `\n +14 B  smcd +2,000 +99\.50% +0\.40% +0\.10%\n`, out)
	assert.NotRegexp(t, `\n +tcp +[0-9,]+ +[0-9.]+%`, out, "tcp counts no waits")

	r.Latency[0].Results[0].ClientSend = nil
	buf.Reset()
	require.NoError(t, r.WriteText(&buf))
	assert.NotContains(t, buf.String(), "client's waits")
}
