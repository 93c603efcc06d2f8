package smcloop

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/smcloop/smcloop/clc"
	"github.com/smcloop/smcloop/internal/peercred"
	"github.com/smcloop/smcloop/internal/presence"
)

// dialUnix dials a unix stream socket. CLC is spoken only to a trusted smcloop listener:
// one whose listener name exists for the socket at address, held by the very process
// the connection reaches (docs/CAPABILITY.md). A dialer with its own
// NetDialer.LocalAddr cannot carry the announcing name, so it is plain.
func (d *Dialer) dialUnix(ctx context.Context, address string, cfg *settings, background bool) (*Conn, error) {
	if d.NetDialer.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.NetDialer.Timeout)
		defer cancel()
	}
	var pid int32
	if d.NetDialer.LocalAddr == nil {
		pid = presence.LookupUnix(ctx, address)
	}
	if pid == 0 {
		return d.dialPlain(ctx, "unix", address, cfg, clc.DeclPeerNoSMC)
	}
	nd := d.NetDialer
	var conn net.Conn
	var err error
	for range 2 { // a fresh random name, should the first be taken
		nd.LocalAddr = presence.UnixClientAddr()
		if conn, err = nd.DialContext(ctx, "unix", address); !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if cred, err := peercred.UnixPeer(conn.(*net.UnixConn)); err != nil || cred.PID != pid {
		// The socket at address is not the listener's any more (replaced after we
		// looked): nothing there expects CLC, so none is spoken.
		c := plainConn(conn, cfg, "unix", clc.DeclPeerNoSMC)
		countHandshake(sideClient, c, nil)
		return requireSMC(c, "dial", "unix")
	}
	if background && !cfg.requireSMC {
		return handshakeInBackground(ctx, conn, cfg, nil, net.KeepAliveConfig{}, "unix"), nil
	}
	return handshakeDialed(ctx, conn, cfg, nil, net.KeepAliveConfig{}, "unix")
}
