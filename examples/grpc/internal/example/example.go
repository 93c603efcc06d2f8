// Package example holds what the gRPC examples share: a Bulk service over smcloop,
// served with transport credentials that tell each handler its connection's mode, and
// the client's dialer.
package example

import (
	"context"
	"log"
	"net"

	"google.golang.org/grpc"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/examples/grpc/bulk"
	"github.com/smcloop/smcloop/examples/grpc/internal/child"
	"github.com/smcloop/smcloop/examples/grpc/smccreds"
)

// Serve serves the Bulk service on an smcloop listener at addr until it fails or, as the
// child of a client started without flags (asChild), until the parent lets it go.
func Serve(addr string, asChild bool) {
	ln, err := smcloop.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(smccreds.New()), bulk.ServerOption())
	bulk.Register(srv, &bulk.Service{})
	if !asChild {
		log.Printf("gRPC server on %s", ln.Addr())
		log.Fatal(srv.Serve(ln))
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	child.Ready(ln.Addr().String())
	if err := child.Serve(func(string) string { return "?" }); err != nil {
		log.Fatal(err)
	}
	srv.Stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
}

// DialSMC is the client's grpc.WithContextDialer: an smcloop connection whose CLC
// handshake runs in the background.
func DialSMC(ctx context.Context, addr string) (net.Conn, error) {
	return smcloop.DialContext(ctx, "tcp", addr)
}
