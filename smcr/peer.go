package smcr

// Peer is the peer's side of the link as Connect took it (the MTU is the one the link
// runs at); the zero LinkInfo before Connect.
func (g *LinkGroup) Peer() LinkInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peer
}

// UncompressedSize is the RMBE size a CLC rmbe_size nibble names (smc_uncompress_bufsize):
// 16 KiB << code.
func UncompressedSize(code uint8) int { return minRMBSize << (code & 0x0f) }
