package smcloop

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/peercred"
	"github.com/smcloop/smcloop/ism"
)

// SendMode selects how a writer moves bytes into the peer's DMB.
type SendMode int

const (
	// SendDefault takes the process default (SMCLOOP_SEND_MODE, else SendNoCopy).
	SendDefault SendMode = iota
	// SendNoCopy maps the peer's DMB and copies user bytes straight into it, as
	// loopback-ism's "DMB no-copy": one copy on send, one on receive.
	SendNoCopy
	// SendCopy fills a private send buffer first and then moves the bytes into the peer's
	// DMB (move_data), as SMC-D does without no-copy and as SMC-R must. For comparison.
	SendCopy
)

func (m SendMode) String() string {
	switch m {
	case SendNoCopy:
		return "nocopy"
	case SendCopy:
		return "copy"
	default:
		return "default"
	}
}

// Config holds the per-connection settings. The zero value takes every process default;
// process defaults come from SMCLOOP_* environment variables (read once, see Environment)
// and otherwise follow the kernel's net.smc sysctl defaults.
type Config struct {
	// RMem fixes the receive buffer (DMB) size in bytes: 16 KiB to 1 MiB, rounded up to
	// 16 KiB << c like the kernel's compressed size, all of it allocated when the
	// connection is set up, as the kernel's net.smc.rmem. Default SMCLOOP_RMEM, else
	// elastic: a 1 MiB DMB of which only the first 64 KiB is allocated; the peer's writer
	// lets its window grow toward the whole ring while it keeps filling it, and gives the
	// memory back when it goes idle (docs/TUNING.md, "Buffers").
	RMem int
	// WMem is the send buffer size in bytes for SendCopy (in no-copy mode the peer's DMB
	// is the send buffer). Default SMCLOOP_WMEM, else 64 KiB (net.smc.wmem).
	WMem int
	// SendMode chooses no-copy or copying sends. Default SMCLOOP_SEND_MODE, else no-copy.
	SendMode SendMode
	// BusyPoll is how long a blocked Read or Write spins on the shared cursors before it
	// sleeps on its doorbell, without yielding: for latency-critical pairs of processes
	// with a CPU each (a spinner that shares a CPU with its peer only delays it). Use a
	// few hundred microseconds; a budget shorter than the round trip only adds spinning.
	// Default SMCLOOP_BUSY_POLL, else 0: the default wait, which spins at most 30 µs
	// while yielding the CPU (to the process's other goroutines and to other threads,
	// such as a peer woken onto this CPU), backs off after spins that did not pay, and
	// spins on at most half the process's Ps at once. Negative: no spinning at all, every
	// wait sleeps on the doorbell at once.
	BusyPoll time.Duration
	// AutocorkSize enables autocorking: while the peer has not consumed our previous push,
	// a small write that leaves at most min(send space / 2, AutocorkSize) bytes pending is
	// held back to go out with what follows (published by the next write, or as soon as
	// the peer catches up). Default SMCLOOP_AUTOCORK_SIZE, else off: unlike the kernel's
	// CDC messages, an SMC-D publication here is one atomic store, so holding writes
	// back saves little (docs/TUNING.md; `smcloop bench --preset autocork` compares).
	// 64 KiB is the kernel's net.smc.autocorking_size. Negative disables autocorking
	// even if the environment enables it.
	AutocorkSize int
	// AutosplitSize splits writes of at least 4/3 of it into segments of this size, each
	// published as soon as it is copied, so the receiver copies out while the sender
	// still copies in. Default SMCLOOP_AUTOSPLIT_SIZE, else 32 KiB (the autosplit patch's
	// smallest; its default, 128 KiB, makes 1 MiB round trips a quarter slower here,
	// docs/TUNING.md); 32 KiB .. 512 MiB. Negative disables autosplit.
	AutosplitSize int
	// DisableSMC turns SMC-D off for this side: a dialer still speaks CLC but declines
	// with NOSMCDDEV, a listener declines every proposal. Also SMCLOOP_SMCD=off.
	DisableSMC bool
	// RequireSMC makes SMC-D mandatory ("SMC or fail"): a dial that would fall back to TCP
	// fails with a *FallbackError carrying both sides' decline codes, after closing the
	// TCP connection, and a listener's Accept returns that error for a connection that
	// would be delivered as TCP (a plain client, or a declined handshake), closing the
	// connection. The error is temporary (net.Error), so accept loops such as
	// http.Server's keep serving. Also SMCLOOP_REQUIRE_SMC=on.
	RequireSMC bool
	// UEID is the user-defined EID offered and accepted in SMC-Dv2 (the kernel requires
	// a common UEID or SEID). Default SMCLOOP_UEID, else "SMCLOOP".
	UEID string
	// HandshakeTimeout bounds one side's CLC exchange (the kernel's CLC_WAIT_TIME, 6 s). A timeout
	// is an error, not a fallback. Default SMCLOOP_CLC_TIMEOUT, else 6 s.
	HandshakeTimeout time.Duration
	// Device is the emulated ISM device the SMC-D backend uses; nil means the process's
	// default device, opened on first use with SMCLOOP_MAX_DMBS as its DMB limit. It is
	// the one setting that names a backend's type: the SMC-D handshake
	// (handshake_smcd.go) is its only user. Off Linux there is no SMC-D and it is
	// ignored.
	Device *ism.Device
}

// settings is a Config with every default resolved and validated.
type settings struct {
	rmem, wmem       int
	elastic          bool // rmem is an elastic DMB (RMem and SMCLOOP_RMEM unset)
	sendMode         SendMode
	busyPoll         time.Duration
	noSpin           bool // BusyPoll < 0: sleep at once, no spinning at all
	autocork         int  // 0: off
	autosplit        int  // 0: off
	smcd             bool // SMC-D is offered and accepted: enabled, and possible in this build
	requireSMC       bool // RequireSMC: a fallback is an error
	ueid             [clc.EIDLen]byte
	handshakeTimeout time.Duration
	device           *ism.Device
}

// envSetting describes one SMCLOOP_* variable.
type envSetting struct {
	doc   string
	parse func(v string, d *envDefaults) error
}

type envDefaults struct {
	rmem, wmem       int
	autocork         int
	autosplit        int
	sendMode         SendMode
	busyPoll         time.Duration
	smcd             bool
	requireSMC       bool
	ueid             string
	handshakeTimeout time.Duration
	maxDMBs          int
	limitHS          bool
}

var envSettings = map[string]envSetting{
	"SMCLOOP_RMEM": {"receive buffer (DMB) size, 16K..1M", func(v string, d *envDefaults) (err error) {
		d.rmem, err = parseSize(v)
		return err
	}},
	"SMCLOOP_WMEM": {"send buffer size for copy mode, 16K..1M", func(v string, d *envDefaults) (err error) {
		d.wmem, err = parseSize(v)
		return err
	}},
	"SMCLOOP_AUTOCORK_SIZE": {"autocorking limit in bytes, e.g. 64K (0 disables)", func(v string, d *envDefaults) (err error) {
		if v == "0" {
			d.autocork = 0
			return nil
		}
		d.autocork, err = parseSize(v)
		return err
	}},
	"SMCLOOP_AUTOSPLIT_SIZE": {"autosplit segment size, 32K..512M (0 disables)", func(v string, d *envDefaults) (err error) {
		if v == "0" {
			d.autosplit = 0
			return nil
		}
		if d.autosplit, err = parseSize(v); err == nil {
			err = checkAutosplit(d.autosplit)
		}
		return err
	}},
	"SMCLOOP_SEND_MODE": {"nocopy or copy", func(v string, d *envDefaults) error {
		switch strings.ToLower(v) {
		case "nocopy":
			d.sendMode = SendNoCopy
		case "copy":
			d.sendMode = SendCopy
		default:
			return fmt.Errorf("want nocopy or copy")
		}
		return nil
	}},
	"SMCLOOP_BUSY_POLL": {"busy-poll budget before sleeping, e.g. 200us; 0 = the default adaptive spin-yield (at most 30us); Config.BusyPoll < 0 disables spinning", func(v string, d *envDefaults) (err error) {
		d.busyPoll, err = time.ParseDuration(v)
		if err == nil && d.busyPoll < 0 {
			err = fmt.Errorf("want a duration >= 0")
		}
		return err
	}},
	"SMCLOOP_SMCD": {"on or off", func(v string, d *envDefaults) (err error) {
		d.smcd, err = parseOnOff(v)
		return err
	}},
	"SMCLOOP_REQUIRE_SMC": {"on or off: a connection that would fall back to TCP is an error instead (Config.RequireSMC)", func(v string, d *envDefaults) (err error) {
		d.requireSMC, err = parseOnOff(v)
		return err
	}},
	"SMCLOOP_UEID": {"user-defined EID, up to 32 of A-Z 0-9 . -", func(v string, d *envDefaults) error {
		if _, err := clc.MakeEID(v); err != nil {
			return err
		}
		d.ueid = v
		return nil
	}},
	"SMCLOOP_CLC_TIMEOUT": {"CLC handshake wait, e.g. 6s", func(v string, d *envDefaults) (err error) {
		d.handshakeTimeout, err = time.ParseDuration(v)
		if err == nil && d.handshakeTimeout <= 0 {
			err = fmt.Errorf("want a positive duration")
		}
		return err
	}},
	"SMCLOOP_LIMIT_HS": {"listeners fall back to TCP while handshakes are congested: on or off", func(v string, d *envDefaults) (err error) {
		d.limitHS, err = parseOnOff(v)
		return err
	}},
	"SMCLOOP_MAX_DMBS": {"DMB limit of the default ISM device (default 5000)", func(v string, d *envDefaults) (err error) {
		d.maxDMBs, err = strconv.Atoi(v)
		if err == nil && d.maxDMBs <= 0 {
			err = fmt.Errorf("want a positive count")
		}
		return err
	}},
	// Read by registry.go when the first connection or listener starts the endpoint;
	// parsed here so that a typo fails every Dial and Listen.
	envIntrospect: {"introspection endpoint for smcloop ss and stats: on or off (docs/CLI.md)", func(v string, d *envDefaults) error {
		_, err := parseOnOff(v)
		return err
	}},
	// Read by internal/peercred itself (the ISM device and the registration tables apply
	// it too); parsed here so that a typo fails every Dial and Listen.
	peercred.EnvPeerUIDs: {"other users' uids whose processes may share memory with this one, e.g. 1000,1001 (docs/SECURITY.md)", func(v string, d *envDefaults) error {
		_, err := peercred.ParseUIDs(v)
		return err
	}},
}

var (
	envOnce sync.Once
	envVal  envDefaults
	envErr  error
)

// processDefaults reads the SMCLOOP_* environment once. An invalid value or an unknown
// SMCLOOP_ name is an error reported by every Dial and Listen, so a typo cannot pass
// silently.
func processDefaults() (envDefaults, error) {
	envOnce.Do(func() { envVal, envErr = readEnv(os.Environ()) })
	return envVal, envErr
}

func readEnv(environ []string) (envDefaults, error) {
	d := envDefaults{
		rmem: 0, wmem: 64 << 10, sendMode: SendNoCopy, smcd: true,
		autocork: 0, autosplit: 32 << 10,
		ueid: "SMCLOOP", handshakeTimeout: clc.WaitTime,
	}
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "SMCLOOP_") {
			continue
		}
		s, ok := envSettings[name]
		if !ok {
			return d, fmt.Errorf("smcloop: unknown environment variable %s; the settings are %s", name, strings.Join(Environment(), ", "))
		}
		if err := s.parse(val, &d); err != nil {
			return d, fmt.Errorf("smcloop: %s=%q: %v (%s)", name, val, err, s.doc)
		}
	}
	return d, nil
}

// Environment lists the SMCLOOP_* variables that set process defaults.
func Environment() []string {
	names := make([]string, 0, len(envSettings))
	for n := range envSettings {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func parseOnOff(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "on", "1", "true":
		return true, nil
	case "off", "0", "false":
		return false, nil
	}
	return false, fmt.Errorf("want on or off")
}

// parseSize accepts a byte count with an optional K, KiB, M or MiB suffix.
func parseSize(s string) (int, error) {
	mult := 1
	u := strings.ToUpper(strings.TrimSpace(s))
	for _, suf := range []struct {
		s string
		m int
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}} {
		if strings.HasSuffix(u, suf.s) {
			u, mult = strings.TrimSuffix(u, suf.s), suf.m
			break
		}
	}
	n, err := strconv.Atoi(u)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive size such as 65536, 64K or 1M")
	}
	return n * mult, nil
}

// checkAutosplit enforces the autosplit patch's range, 32 KiB .. 512 MiB.
func checkAutosplit(n int) error {
	if n < 32<<10 || n > 512<<20 {
		return fmt.Errorf("want 32K..512M")
	}
	return nil
}

// dmbSize rounds a requested buffer size up to the next DMB size, as the kernel's
// smc_compress_bufsize does, and refuses sizes SMC-D cannot have.
func dmbSize(field string, n int) (int, error) {
	if n < 1 || n > ism.MaxDMBSize {
		return 0, fmt.Errorf("smcloop: %s = %d is out of range: SMC-D buffers are 16 KiB to 1 MiB; set Config.%s or SMCLOOP_%s within that range",
			field, n, field, strings.ToUpper(field))
	}
	size := ism.MinDMBSize
	for size < n {
		size <<= 1
	}
	return size, nil
}

// resolve applies process defaults to c and validates the result.
func (c *Config) resolve() (*settings, error) {
	if *c == (Config{}) {
		// The defaults depend only on the process defaults and the default device, both
		// read once: every dial with them shares one resolution (settings are never
		// changed after it).
		zeroOnce.Do(func() { zeroVal, zeroErr = c.resolveNew() })
		return zeroVal, zeroErr
	}
	return c.resolveNew()
}

var (
	zeroOnce sync.Once
	zeroVal  *settings
	zeroErr  error
)

// resolveNew is resolve without the shared resolution of the zero Config.
func (c *Config) resolveNew() (*settings, error) {
	env, err := processDefaults()
	if err != nil {
		return nil, err
	}
	s := &settings{
		rmem: env.rmem, wmem: env.wmem, sendMode: env.sendMode, busyPoll: env.busyPoll,
		autocork: env.autocork, autosplit: env.autosplit,
		smcd: smcdAvailable && env.smcd && !c.DisableSMC, handshakeTimeout: env.handshakeTimeout, device: c.Device,
		requireSMC: env.requireSMC || c.RequireSMC,
	}
	// Off Linux RequireSMC is no configuration error: each connection fails with
	// NOSMCDEV, as it would on a host without an SMC device.
	if s.requireSMC && !s.smcd && smcdAvailable {
		return nil, fmt.Errorf("smcloop: SMC-D is both required (Config.RequireSMC or SMCLOOP_REQUIRE_SMC=on) and disabled (Config.DisableSMC or SMCLOOP_SMCD=off), so every connection would fail; unset one of them")
	}
	if c.RMem != 0 {
		s.rmem = c.RMem
	}
	if c.WMem != 0 {
		s.wmem = c.WMem
	}
	if s.rmem == 0 {
		s.rmem, s.elastic = ism.MaxDMBSize, true
	} else if s.rmem, err = dmbSize("RMem", s.rmem); err != nil {
		return nil, err
	}
	if s.wmem, err = dmbSize("WMem", s.wmem); err != nil {
		return nil, err
	}
	switch c.SendMode {
	case SendDefault:
	case SendNoCopy, SendCopy:
		s.sendMode = c.SendMode
	default:
		return nil, fmt.Errorf("smcloop: Config.SendMode %d is not SendDefault, SendNoCopy or SendCopy", c.SendMode)
	}
	switch {
	case c.BusyPoll < 0:
		s.busyPoll, s.noSpin = 0, true
	case c.BusyPoll > 0:
		s.busyPoll = c.BusyPoll
	}
	switch {
	case c.AutocorkSize < 0:
		s.autocork = 0
	case c.AutocorkSize > 0:
		s.autocork = c.AutocorkSize
	}
	switch {
	case c.AutosplitSize < 0:
		s.autosplit = 0
	case c.AutosplitSize > 0:
		if err := checkAutosplit(c.AutosplitSize); err != nil {
			return nil, fmt.Errorf("smcloop: Config.AutosplitSize %d: %v; or negative to disable", c.AutosplitSize, err)
		}
		s.autosplit = c.AutosplitSize
	}
	if c.HandshakeTimeout < 0 {
		return nil, fmt.Errorf("smcloop: Config.HandshakeTimeout %v is negative; use 0 for the default %v", c.HandshakeTimeout, env.handshakeTimeout)
	}
	if c.HandshakeTimeout > 0 {
		s.handshakeTimeout = c.HandshakeTimeout
	}
	ueid := env.ueid
	if c.UEID != "" {
		ueid = c.UEID
	}
	if s.ueid, err = clc.MakeEID(ueid); err != nil {
		return nil, fmt.Errorf("smcloop: Config.UEID %q: %v", ueid, err)
	}
	if s.smcd && s.device == nil {
		if s.device, err = defaultDevice(env.maxDMBs); err != nil {
			return nil, err
		}
	}
	return s, nil
}

var (
	devOnce sync.Once
	devVal  *ism.Device
	devErr  error
)

// defaultDevice opens the process's ISM device on first use. It lives as long as the
// process, like the kernel's loopback-ism device lives as long as the kernel.
func defaultDevice(maxDMBs int) (*ism.Device, error) {
	devOnce.Do(func() {
		devVal, devErr = ism.Open(ism.Config{MaxDMBs: maxDMBs})
		if devErr != nil {
			devErr = fmt.Errorf("smcloop: opening the ISM device: %w", devErr)
		}
	})
	return devVal, devErr
}
