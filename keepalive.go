package smcloop

import (
	"net"
	"time"
)

// TCP keep-alive applies to connections that carry their bytes over TCP. Go's net
// package turns keep-alive on for every dialed and accepted TCP connection (four
// setsockopt calls on each side); an SMC connection's TCP connection carries nothing
// after the handshake, and its peer's death closes it (the liveness channel), so
// smcloop creates its TCP connections without keep-alive and applies the configured
// keep-alive only to connections that fall back to TCP.

// keepAliveConfig is the keep-alive that net would apply for a Dialer or ListenConfig
// with these fields (see net.Dialer.KeepAlive and KeepAliveConfig).
func keepAliveConfig(idle time.Duration, cfg net.KeepAliveConfig) net.KeepAliveConfig {
	if !cfg.Enable && idle >= 0 {
		cfg = net.KeepAliveConfig{Enable: true, Idle: idle}
	}
	return cfg
}

// noKeepAlive is the keep-alive setting under which net leaves it off.
var noKeepAlive = net.KeepAliveConfig{Enable: false}

// applyKeepAlive gives a fallback connection the keep-alive its creator asked for.
func applyKeepAlive(c *Conn, ka net.KeepAliveConfig) {
	if c == nil || c.isSMC() || !ka.Enable {
		return
	}
	if tc, ok := c.tcp.Conn.(*net.TCPConn); ok {
		tc.SetKeepAliveConfig(ka)
	}
}
