// Package smccreds is a gRPC transport credential for smcloop connections. It adds no
// security of its own: both handshakes hand the connection through unchanged, and the
// AuthInfo they return says what carries the connection's bytes, so a handler can ask
//
//	p, _ := peer.FromContext(ctx)
//	info, _ := p.AuthInfo.(smccreds.Info)
//	info.Mode // "SMCD", or e.g. "TCP 0x03010000/0x00000000 (PEERNOSMC/-)"
//
// Use it on both sides, with a listener from smcloop.Listen on the server and a context
// dialer calling smcloop on the client. Connections that are not smcloop connections
// (a net.Listener or a unix socket) pass through too, with Info.Conn nil.
package smccreds

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/smcloop/smcloop"
)

// AuthType is what Info.AuthType returns.
const AuthType = "smcloop"

// Info is the AuthInfo of a connection: what smcloop says is on the wire.
type Info struct {
	credentials.CommonAuthInfo
	// Mode is the connection's smcloop.Conn.Mode(): "SMCD" when the bytes go through
	// shared memory, "TCP 0x.../0x... (LOCAL/PEER)" after a fallback, with the decline
	// codes and their names. For a connection that is not an smcloop connection it is
	// "not smcloop (NETWORK)".
	Mode string
	// SMC is smcloop.Conn.UsingSMC().
	SMC bool
	// Conn is the smcloop connection, for its Stats and controls; nil if the connection
	// is not an smcloop connection.
	Conn *smcloop.Conn
}

// AuthType returns AuthType.
func (Info) AuthType() string { return AuthType }

// ValidateAuthority accepts any :authority override: the credential authenticates no
// server name.
func (Info) ValidateAuthority(string) error { return nil }

// NewInfo describes c.
func NewInfo(c net.Conn) Info {
	info := Info{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
	sc, ok := c.(*smcloop.Conn)
	if !ok {
		info.Mode = "not smcloop (" + c.LocalAddr().Network() + ")"
		return info
	}
	info.Mode, info.SMC, info.Conn = sc.Mode(), sc.UsingSMC(), sc
	return info
}

// FromContext returns the Info of the connection that carries the RPC of ctx, as a
// server handler or an interceptor sees it.
func FromContext(ctx context.Context) (Info, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Info{}, false
	}
	info, ok := p.AuthInfo.(Info)
	return info, ok
}

type transport struct{}

// New returns the transport credentials.
func New() credentials.TransportCredentials { return transport{} }

// ClientHandshake returns conn and its Info.
func (transport) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, NewInfo(conn), nil
}

// ServerHandshake returns conn and its Info.
func (transport) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, NewInfo(conn), nil
}

func (transport) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: AuthType}
}

func (transport) Clone() credentials.TransportCredentials { return transport{} }

func (transport) OverrideServerName(string) error { return nil }
