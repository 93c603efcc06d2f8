package smcloop

import (
	"context"
	"net"
)

// Dialer dials SMC connections. The zero value uses the process defaults.
type Dialer struct {
	// Config holds the SMC settings of the connections this dialer makes.
	Config Config
	// NetDialer dials the TCP connection (timeouts, local address, keep-alive). Its
	// Timeout also bounds the CLC handshake.
	NetDialer net.Dialer
}

// Dial connects to address on a TCP network ("tcp", "tcp4" or "tcp6") and runs the SMC
// handshake. The result uses SMC-D when both sides can, TCP otherwise (see UsingSMC).
func Dial(network, address string) (*Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// Dial is DialContext with a background context.
func (d *Dialer) Dial(network, address string) (*Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address and runs the SMC handshake. Misconfiguration (an
// invalid Config or SMCLOOP_* variable) fails here before any connection is made; a
// decline by either side yields a working TCP connection; a handshake that times out or
// breaks the protocol is an error, as with the kernel.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (*Conn, error) {
	if err := checkNetwork(network); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	cfg, err := d.Config.resolve()
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if d.NetDialer.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.NetDialer.Timeout)
		defer cancel()
	}
	tcp, err := d.NetDialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c, err := clientHandshake(ctx, tcp, cfg)
	if err != nil {
		tcp.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Source: tcp.LocalAddr(), Addr: tcp.RemoteAddr(), Err: err}
	}
	return c, nil
}

func checkNetwork(network string) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
		return nil
	}
	return net.UnknownNetworkError(network + " (smcloop runs SMC over tcp, tcp4 or tcp6)")
}
