package bench

import (
	"fmt"
	"slices"
	"strings"
)

// Preset is a named set of bench options that reproduces one reference table in one
// command. It stands for command-line options, so that options given explicitly
// override it and the run's record shows what was measured.
type Preset struct {
	Name    string
	Seed    string // the reference series whose table the preset reproduces (docs/HISTORY.md)
	Summary string
	// Options are the command-line options the preset stands for, by flag name, in order.
	Options []Option
	// Compare pairs the transports (or HTTP servers) whose difference the reference
	// table's percentage columns show.
	Compare *Comparison
}

// Option is one command-line option: a flag name (without dashes) and its value.
type Option struct {
	Name, Value string
}

// presets are the reference tables. Durations keep each preset at one to two minutes on a
// two-CPU machine.
var presets = []Preset{
	{
		Name: "autocork",
		Seed: "001 (autocorking)",
		Summary: "stream bandwidth for 1 B .. 64 KiB messages, smcloop with and without autocorking and TCP " +
			"(qperf tcp_bw -oo msg_size:1:64K:*2)",
		Options: []Option{
			{"mode", "bw"},
			{"bw-sizes", "1:64K:*2"},
			{"transports", "smcd-autocork,smcd,tcp"},
			{"duration", "500ms"},
			{"warmup", "100ms"},
			{"rounds", "2"},
		},
		Compare: &Comparison{Feature: "autocork", With: "smcd-autocork", Without: "smcd"},
	},
	{
		Name: "autosplit",
		Seed: "002 (autosplit)",
		Summary: "ping-pong latency for 128 KiB .. 1 MiB messages with 1 MiB buffers, smcloop with and without " +
			"autosplit and TCP (sockperf pp -m SIZE)",
		Options: []Option{
			{"mode", "lat"},
			{"lat-sizes", "128K,256K,512K,1M"},
			{"transports", "smcd-1m-split,smcd-1m-nosplit,tcp"},
			{"duration", "1s"},
			{"warmup", "200ms"},
			{"rounds", "3"},
			// Autosplit overlaps the sender's copy in with the receiver's copy out, which
			// takes the two on different CPUs at once: on two CPUs, unpinned processes are
			// often put on one (the waker's), where splitting only adds wake-ups.
			{"pin", "true"},
		},
		Compare: &Comparison{Feature: "autosplit", With: "smcd-1m-split", Without: "smcd-1m-nosplit"},
	},
	{
		Name: "sendfile",
		Seed: "000 (TCP_CORK and sendfile)",
		Summary: "a net/http server serving a 4 KiB file to 100 keep-alive connections: smcloop with sendfile " +
			"and cork, smcloop with plain writes, TCP with sendfile and cork (nginx, wrk -c 100)",
		Options: []Option{
			{"mode", "http"},
			{"transports", strings.Join(DefaultHTTPServers, ",")},
			{"http-conns", fmt.Sprint(DefaultHTTPConns)},
			{"http-size", FormatSize(DefaultHTTPFileSize)},
			{"duration", "5s"},
			{"warmup", "1s"},
			{"rounds", "2"},
		},
		Compare: &Comparison{Feature: "sendfile+cork", With: "smcd:sendfile", Without: "smcd:write"},
	},
}

// Presets returns every preset, in a fixed order.
func Presets() []Preset { return slices.Clone(presets) }

// PresetNames returns the presets' names, in the order of Presets.
func PresetNames() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	return names
}

// LookupPreset returns the preset called name. The error for an unknown name lists the
// known ones.
func LookupPreset(name string) (Preset, error) {
	for _, p := range presets {
		if p.Name == name {
			return p, nil
		}
	}
	return Preset{}, fmt.Errorf("unknown preset %q (known: %s)", name, strings.Join(PresetNames(), ", "))
}

// Expand returns the options of p that the command line did not give: isSet reports
// whether an option was given explicitly, which then overrides the preset's.
func (p Preset) Expand(isSet func(name string) bool) []Option {
	var out []Option
	for _, o := range p.Options {
		if !isSet(o.Name) {
			out = append(out, o)
		}
	}
	return out
}

// CompareFor returns the preset's comparison if both of its transports are among names
// (which the command line may have changed), else nil.
func (p Preset) CompareFor(names []string) *Comparison {
	if p.Compare == nil || !slices.Contains(names, p.Compare.With) || !slices.Contains(names, p.Compare.Without) {
		return nil
	}
	c := *p.Compare
	return &c
}
