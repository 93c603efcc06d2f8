package bench

import (
	"bytes"
	"slices"
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
	if got := PresetNames(); !slices.Equal(got, []string{"autocork", "autosplit", "sendfile"}) {
		t.Fatalf("presets %v", got)
	}
	if _, err := LookupPreset("nagle"); err == nil || !strings.Contains(err.Error(), "known: autocork, autosplit, sendfile") {
		t.Errorf("unknown preset: %v", err)
	}

	// Nothing given on the command line: the whole preset.
	p, err := LookupPreset("autocork")
	if err != nil {
		t.Fatal(err)
	}
	none := func(string) bool { return false }
	if got := p.Expand(none); !slices.Equal(got, p.Options) {
		t.Errorf("Expand with nothing set = %v, want %v", got, p.Options)
	}
	o := presetOptions(p.Expand(none))
	sizes, err := ParseSizes(o["bw-sizes"])
	if err != nil || len(sizes) != 17 || sizes[0] != 1 || sizes[16] != 64<<10 {
		t.Errorf("autocork sizes %v (%v), want 1 B .. 64 KiB in 17 steps", sizes, err)
	}
	if o["mode"] != "bw" || o["transports"] != "smcd-autocork,smcd,tcp" {
		t.Errorf("autocork options %v", o)
	}
	// 17 sizes, 3 transports: one to two minutes.
	d, _ := time.ParseDuration(o["duration"])
	w, _ := time.ParseDuration(o["warmup"])
	rounds, _ := strconv.Atoi(o["rounds"])
	if total := time.Duration(17*3*rounds) * (d + w); total < 30*time.Second || total > 100*time.Second {
		t.Errorf("autocork measures for %v", total)
	}

	// Options given explicitly override the preset's, which keeps its order otherwise.
	set := map[string]bool{"duration": true, "transports": true}
	got := p.Expand(func(name string) bool { return set[name] })
	var names []string
	for _, o := range got {
		names = append(names, o.Name)
	}
	if !slices.Equal(names, []string{"mode", "bw-sizes", "warmup", "rounds"}) {
		t.Errorf("Expand with duration and transports set = %v", got)
	}

	// The comparison holds while both of its transports are measured.
	if c := p.CompareFor([]string{"tcp", "smcd", "smcd-autocork"}); c == nil || *c != *p.Compare || c == p.Compare {
		t.Errorf("CompareFor(all) = %v, want a copy of %v", c, p.Compare)
	}
	if c := p.CompareFor([]string{"smcd", "tcp"}); c != nil {
		t.Errorf("CompareFor without smcd-autocork = %v", c)
	}

	as, _ := LookupPreset("autosplit")
	o = presetOptions(as.Options)
	sizes, err = ParseSizes(o["lat-sizes"])
	if err != nil || !slices.Equal(sizes, []int{128 << 10, 256 << 10, 512 << 10, 1 << 20}) {
		t.Errorf("autosplit sizes %v (%v)", sizes, err)
	}
	if o["mode"] != "lat" || o["pin"] != "true" || as.Compare.With != "smcd-1m-split" || as.Compare.Without != "smcd-1m-nosplit" ||
		!strings.Contains(o["transports"], "tcp") {
		t.Errorf("autosplit options %v, comparison %+v", o, as.Compare)
	}

	sf, _ := LookupPreset("sendfile")
	o = presetOptions(sf.Options)
	if o["mode"] != "http" || o["http-conns"] != "100" || o["http-size"] != "4K" {
		t.Errorf("sendfile options %v", o)
	}
	servers := strings.Split(o["transports"], ",")
	if !slices.Equal(servers, DefaultHTTPServers) || sf.CompareFor(servers) == nil {
		t.Errorf("sendfile servers %v, comparison %+v", servers, sf.Compare)
	}
	for _, s := range servers {
		if _, method, _ := strings.Cut(s, ":"); method != HTTPSendfile && method != HTTPWrite {
			t.Errorf("server %q: method %q", s, method)
		}
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
	if err := compareResults().WriteText(&buf); err != nil {
		t.Fatal(err)
	}
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
		if !strings.Contains(out, want+"\n") {
			t.Errorf("text lacks line %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "msgs/s") {
		t.Errorf("the plain stream table is there too:\n%s", out)
	}

	// Without one of the pair, the plain table.
	r := compareResults()
	r.Stream[0].Results = r.Stream[0].Results[1:]
	buf.Reset()
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "msgs/s") || strings.Contains(buf.String(), "gain") {
		t.Errorf("no plain table without the pair:\n%s", buf.String())
	}
}

func TestWriteTextLatencyCompare(t *testing.T) {
	r := sampleResults()
	r.Settings.Compare = &Comparison{Feature: "autosplit", With: "smcd", Without: "tcp"}
	r.Latency[0].Results[0].ClientSend = &SendStats{Conns: 2, Writes: 100, AutosplitSegments: 700, DMB: 1 << 20, PeerDMB: 1 << 20}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"            smcd           tcp      autosplit improvement        smcd",
		"  size    p50   mean    p50   mean     p50           mean  vs tcp  segs/msg  floor",
		"  14 B  12.80  13.20  25.60  28.00  +50.0%         +52.9%  -50.0%       7.0  0.132",
		"    smcd: 700 segments in 100 writes; DMB 1 MiB, peer's 1 MiB.",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("text lacks line %q:\n%s", want, out)
		}
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
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
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
