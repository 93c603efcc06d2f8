package clc

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tcpFlow writes a TCP connection as raw IPv4 packets into a pcap file
// (LINKTYPE_RAW), one segment per message, so a decoder sees the stream as
// if captured on the wire.
type tcpFlow struct {
	pcap bytes.Buffer
	seq  [2]uint32 // next sequence number of client (0) and server (1)
	usec uint32
	src  [2][4]byte
	port [2]uint16
}

func newTCPFlow() *tcpFlow {
	f := &tcpFlow{seq: [2]uint32{1000, 5000}}
	f.src = [2][4]byte{{10, 0, 0, 1}, {10, 0, 0, 2}}
	f.port = [2]uint16{40001, 50002}
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], 0xA1B2C3D4)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], 65535)
	binary.LittleEndian.PutUint32(h[20:], 101) // LINKTYPE_RAW
	f.pcap.Write(h[:])
	f.segment(0, 0x02, nil) // SYN
	f.segment(1, 0x12, nil) // SYN-ACK
	f.segment(0, 0x10, nil) // ACK
	return f
}

// segment appends one TCP segment from side (0 client, 1 server).
func (f *tcpFlow) segment(side int, flags byte, payload []byte) {
	other := 1 - side
	ip := make([]byte, 20+20+len(payload))
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	copy(ip[12:16], f.src[side][:])
	copy(ip[16:20], f.src[other][:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], f.port[side])
	binary.BigEndian.PutUint16(tcp[2:], f.port[other])
	binary.BigEndian.PutUint32(tcp[4:], f.seq[side])
	if flags&0x10 != 0 {
		binary.BigEndian.PutUint32(tcp[8:], f.seq[other])
	}
	tcp[12], tcp[13] = 5<<4, flags
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	copy(tcp[20:], payload)
	f.seq[side] += uint32(len(payload))
	if flags&0x02 != 0 {
		f.seq[side]++ // SYN takes a sequence number
	}
	var rec [16]byte
	f.usec += 100
	binary.LittleEndian.PutUint32(rec[4:], f.usec)
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(ip)))
	binary.LittleEndian.PutUint32(rec[12:], uint32(len(ip)))
	f.pcap.Write(rec[:])
	f.pcap.Write(ip)
}

// TestWiresharkDecodesSMCR writes the SMC-Rv2 Proposal, Accept and Confirm
// of this package into a pcap and checks that Wireshark's SMC dissector
// (tshark, found on PATH) decodes every field back. Without tshark there is
// nothing to run the check with and the test skips.
func TestWiresharkDecodesSMCR(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	prop, _ := propV2R(t)
	eid := eid32("SMCLOOP")
	acc := acceptRBase()
	acc.Type, acc.Version, acc.FirstContact, acc.EID = TypeAccept, 2, true, eid
	acc.FCE, acc.V2Direct = fceR(), true
	accMsg, err := acc.Append(nil)
	require.NoError(t, err)
	conf := acceptRBase()
	conf.Type, conf.Version, conf.FirstContact, conf.EID = TypeConfirm, 2, true, eid
	conf.FCE, conf.V2Direct = fceR(), true
	conf.QPN, conf.RKey, conf.AlertToken, conf.PSN = 0x22, 0x5678, 9, 0x000102
	conf.GIDList = [][GIDLen]byte{gidV4(10, 0, 0, 1), gidV4(10, 0, 1, 1)}
	confMsg, err := conf.Append(nil)
	require.NoError(t, err)

	f := newTCPFlow()
	f.segment(0, 0x18, prop)
	f.segment(1, 0x18, accMsg)
	f.segment(0, 0x18, confMsg)
	dir := t.TempDir()
	if keep := os.Getenv("SMCLOOP_KEEP_PCAP"); keep != "" {
		dir = keep // to look at the capture in Wireshark
	}
	path := filepath.Join(dir, "smcr.pcap")
	require.NoError(t, os.WriteFile(path, f.pcap.Bytes(), 0o600))

	fields := []string{
		"smc.proposal.smc.version", "smc.proposal.smcv2.type", "smc.proposal.rocev2.gid.ipv4",
		"smc.proposal.eid",
		"smc.accept.server.qp.number", "smc.accept.server.rmb.rkey",
		"smc.accept.server.rmb.element.alert.token", "smc.accept.server.rmb.virtual.address",
		"smc.accept.initial.psn", "smc.accept.rmb.buffer.size", "smc.accept.qp.mtu.value",
		"smc.accept.eid", "smc.accept.peer.host.name",
		"smc.confirm.client.qp.number", "smc.confirm.client.rmb.rkey",
		"smc.client.rmb.element.alert.token", "smc.initial.psn",
		"smc.confirm.gid.list.entry_count", "smc.confirm.gid.list.entry",
	}
	args := []string{"-r", path, "-o", "tcp.try_heuristic_first:TRUE", "-Y", "smc", "-T", "fields", "-E", "separator=|"}
	for _, fl := range fields {
		args = append(args, "-e", fl)
	}
	out, err := exec.Command(tshark, args...).Output()
	require.NoError(t, err, "tshark %v", args)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 3, "one SMC packet each for Proposal, Accept and Confirm:\n%s", out)
	got := map[string]string{}
	for _, line := range lines {
		for i, v := range strings.Split(line, "|") {
			if v != "" {
				got[fields[i]] = v
			}
		}
	}
	assert.Equal(t, map[string]string{
		"smc.proposal.smc.version":                  "2",
		"smc.proposal.smcv2.type":                   "0", // SMC-R
		"smc.proposal.rocev2.gid.ipv4":              "10.0.0.1",
		"smc.proposal.eid":                          string(eid[:]),
		"smc.accept.server.qp.number":               "0x000011",
		"smc.accept.server.rmb.rkey":                "0x00001234",
		"smc.accept.server.rmb.element.alert.token": "0x00000007",
		"smc.accept.server.rmb.virtual.address":     "0x00007f0012340000",
		"smc.accept.initial.psn":                    "0xabcdef",
		"smc.accept.rmb.buffer.size":                "2",
		"smc.accept.qp.mtu.value":                   "3",
		"smc.accept.eid":                            string(eid[:]),
		"smc.accept.peer.host.name":                 string(blank("host-a", HostnameLen)),
		"smc.confirm.client.qp.number":              "0x000022",
		"smc.confirm.client.rmb.rkey":               "0x00005678",
		"smc.client.rmb.element.alert.token":        "0x00000009",
		"smc.initial.psn":                           "0x000102",
		"smc.confirm.gid.list.entry_count":          "2",
		"smc.confirm.gid.list.entry":                "::ffff:10.0.0.1,::ffff:10.0.1.1",
	}, got)
}
