// Command stream streams 64 KiB gRPC messages over smcloop: the client sends numbered
// messages on the Bulk service's client-streaming Upload method, the server checks the
// order and every byte of each and, when the client closes the stream, replies with the
// count. With no flags it runs both, the server in a child process:
//
//	go run ./cmd/stream                          # server and client, two processes
//	go run ./cmd/stream -listen 127.0.0.1:7002   # a server
//	go run ./cmd/stream -dial 127.0.0.1:7002     # a client
//
// The client prints what the server saw of its connection and the throughput.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"

	"github.com/smcloop/smcloop/examples/grpc/bulk"
	"github.com/smcloop/smcloop/examples/grpc/internal/child"
	"github.com/smcloop/smcloop/examples/grpc/internal/example"
	"github.com/smcloop/smcloop/examples/grpc/smccreds"
)

func main() {
	listen := flag.String("listen", "", "serve on this address")
	dial := flag.String("dial", "", "stream to the server at this address")
	duration := flag.Duration("duration", 2*time.Second, "how long to stream")
	size := flag.Int("size", 64<<10, "message size in bytes")
	asChild := flag.Bool("child", false, "serve as the child of a client started without flags")
	flag.Parse()
	log.SetFlags(0)
	switch {
	case *listen != "":
		example.Serve(*listen, *asChild)
	case *dial != "":
		if err := stream(*dial, *duration, *size); err != nil {
			log.Fatal(err)
		}
	default:
		p, err := child.Start(nil, "-child", "-listen", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		err = stream(p.Ready[0], *duration, *size)
		if cerr := p.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("server: %w", cerr)
		}
		if err != nil {
			log.Fatal(err)
		}
	}
}

func stream(addr string, duration time.Duration, size int) error {
	if size < bulk.HeaderSize || size > bulk.MaxPattern {
		return fmt.Errorf("size %d: want %d..%d bytes", size, bulk.HeaderSize, bulk.MaxPattern)
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration+time.Minute)
	defer cancel()
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(smccreds.New()),
		grpc.WithContextDialer(example.DialSMC))
	if err != nil {
		return err
	}
	defer cc.Close()
	c := bulk.NewClient(cc)
	saw, err := c.Whoami(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("connection: server saw %s (smc=%t)\n", saw.Mode, saw.SMC)

	start := time.Now()
	u, err := c.Upload(ctx, size)
	if err != nil {
		return err
	}
	for time.Since(start) < duration {
		if err := u.Send(); err != nil {
			return fmt.Errorf("calling Upload: %w", err)
		}
	}
	count, n, err := u.Close()
	if err != nil {
		return fmt.Errorf("calling Upload: %w", err)
	}
	elapsed := time.Since(start)
	fmt.Printf("Upload %d B messages: the server checked %d messages, %d bytes, in %s: %.1f MB/s, %.0f msgs/s\n",
		size, count, n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds()/1e6, float64(count)/elapsed.Seconds())
	return nil
}
