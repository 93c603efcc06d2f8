package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/clc"
)

// errNoSMC is chk's error for a connection that fell back to TCP (exit status 1).
var errNoSMC = errors.New("not using SMC-D")

// codeMeanings say in a line what a decline code means for smcloop.
var codeMeanings = map[uint32]string{
	clc.DeclMem:        "out of memory or descriptors for a DMB, or every handshake slot of the listener was taken",
	clc.DeclCnfErr:     "configuration error",
	clc.DeclPeerNoSMC:  "the server gave no SMC capability signal: no smcloop listener serves this address on this host, or LimitHandshake withdrew it",
	clc.DeclNoSMCDev:   "SMC-D is off on the declining side (Config.DisableSMC or SMCLOOP_SMCD=off)",
	clc.DeclNoSMCDDev:  "no SMC-D device on the declining side (SMC-D turned off there: Config.DisableSMC or SMCLOOP_SMCD=off)",
	clc.DeclNoISM2Supp: "the device has no ISMv2 support",
	clc.DeclNoV2Ext:    "the proposal had no CLC v2 extension",
	clc.DeclNoV2DExt:   "the proposal had no SMC-Dv2 extension",
	clc.DeclNoSEID:     "the proposal had no SEID",
	clc.DeclNoSMCD2Dev: "no common SMC-Dv2 device: the other process belongs to a user not trusted with shared memory (SMCLOOP_PEER_UIDS), or its device is unreachable",
	clc.DeclNoUEID:     "no common UEID (SMCLOOP_UEID differs between the two sides)",
	clc.DeclModeUnsupp: "the SMC modes proposed are not supported",
	clc.DeclMaxDMB:     "the DMB limit of the ISM device was reached (SMCLOOP_MAX_DMBS)",
	clc.DeclPeerDecl:   "the peer declined; its code says why",
	clc.DeclSyncErr:    "the link groups of the two sides were out of sync",
	clc.DeclIntErr:     "internal error",
}

func codeMeaning(code uint32) string {
	if code == 0 {
		return "the peer did not decline"
	}
	if m, ok := codeMeanings[code]; ok {
		return m
	}
	return "see the smcss man page"
}

func chkCommand() *cli.Command {
	return &cli.Command{
		Name:      "chk",
		Usage:     "check whether a connection to a server uses SMC-D (like smc_chk)",
		ArgsUsage: "HOST:PORT | /path/to/unix.sock",
		Description: `Dials the address with smcloop, reports SMC-D or the fallback with its decline
codes, and closes the connection without sending anything. Exit status 0 for SMC-D,
1 otherwise.`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "bound for the connection and the handshake"},
		},
		Action: func(cc *cli.Context) error {
			if cc.NArg() != 1 {
				return fmt.Errorf("chk takes one address, HOST:PORT or a unix socket path; got %q", cc.Args().Slice())
			}
			return chk(cc, cc.Args().First(), cc.Duration("timeout"))
		},
	}
}

// chkNetwork is the network of a chk address: a path is a unix socket.
func chkNetwork(addr string) string {
	if strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, "./") || strings.HasPrefix(addr, "@") {
		return "unix"
	}
	return "tcp"
}

func chk(cc *cli.Context, addr string, timeout time.Duration) error {
	d := smcloop.Dialer{NetDialer: net.Dialer{Timeout: timeout}}
	c, err := d.DialContext(cc.Context, chkNetwork(addr), addr)
	if err != nil {
		return fmt.Errorf("chk %s: %w", addr, err)
	}
	defer c.Close()
	w := cc.App.Writer
	if c.UsingSMC() {
		st := c.Stats()
		fmt.Fprintf(w, "%s: SMC-D (SMC-Dv2), local DMB %d bytes, peer DMB %d bytes\n", addr, st.RMBSize, st.PeerRMBSize)
		return nil
	}
	local, peer := c.FallbackReason()
	fmt.Fprintf(w, "%s: TCP fallback, not SMC-D\n", addr)
	reasonLine(w, "local", local)
	reasonLine(w, "peer", peer)
	return fmt.Errorf("%s: %w (%s)", addr, errNoSMC, c.Mode())
}

func reasonLine(w io.Writer, who string, code uint32) {
	name := "-"
	if code != 0 {
		name = clc.CodeName(code)
	}
	fmt.Fprintf(w, "  %-5s reason 0x%08x %-10s %s\n", who, code, name, codeMeaning(code))
}
