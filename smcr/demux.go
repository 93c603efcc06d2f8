package smcr

// Recv is one received work request's message, demultiplexed on its first byte as
// smc_wr_rx_demultiplex does: 0xFE is a CDC message (smc_cdc_rx_handler), anything else
// an LLC message (smc_llc_rx_handler).
type Recv struct {
	CDC *CDC       // a CDC message, or nil
	LLC LLCMessage // an LLC message, or nil
}

// ParseRecv decodes a received message. A message of fewer than 44 bytes, a CDC message
// whose length byte is not 44, an LLC message that ParseLLC refuses: all are errors
// (matching ErrMalformed or ErrMalformedLLC), which the receiver drops as the kernel does.
func ParseRecv(b []byte) (Recv, error) {
	if len(b) > 0 && b[0] == cdcMsgType {
		m, err := ParseCDC(b)
		if err != nil {
			return Recv{}, err
		}
		return Recv{CDC: m}, nil
	}
	m, err := ParseLLC(b)
	if err != nil {
		return Recv{}, err
	}
	return Recv{LLC: m}, nil
}
