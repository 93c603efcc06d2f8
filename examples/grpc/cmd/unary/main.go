// Command unary calls a gRPC unary method over smcloop: the client sends messages of N
// bytes to the Bulk service's Exchange method, the server checks every byte and replies
// with N bytes, which the client checks. With no flags it runs both, the server in a
// child process:
//
//	go run ./cmd/unary                          # server and client, two processes
//	go run ./cmd/unary -listen 127.0.0.1:7001   # a server
//	go run ./cmd/unary -dial 127.0.0.1:7001     # a client
//
// The client prints what the server saw of its connection (Whoami: SMCD, or the TCP
// fallback and its reason) and the calls' latencies.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/smcloop/smcloop/examples/grpc/bulk"
	"github.com/smcloop/smcloop/examples/grpc/internal/child"
	"github.com/smcloop/smcloop/examples/grpc/internal/example"
	"github.com/smcloop/smcloop/examples/grpc/smccreds"
)

func main() {
	listen := flag.String("listen", "", "serve on this address")
	dial := flag.String("dial", "", "call the server at this address")
	calls := flag.Int("n", 2000, "calls per size")
	sizes := flag.String("sizes", "16,4096,65536", "message sizes in bytes, comma-separated")
	asChild := flag.Bool("child", false, "serve as the child of a client started without flags")
	flag.Parse()
	log.SetFlags(0)
	switch {
	case *listen != "":
		example.Serve(*listen, *asChild)
	case *dial != "":
		if err := call(*dial, *calls, *sizes); err != nil {
			log.Fatal(err)
		}
	default:
		p, err := child.Start(nil, "-child", "-listen", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		err = call(p.Ready[0], *calls, *sizes)
		if cerr := p.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("server: %w", cerr)
		}
		if err != nil {
			log.Fatal(err)
		}
	}
}

func call(addr string, calls int, sizeList string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(smccreds.New()),
		grpc.WithContextDialer(example.DialSMC))
	if err != nil {
		return err
	}
	defer cc.Close()
	c := bulk.NewClient(cc)

	var p peer.Peer
	saw, err := c.Whoami(ctx, grpc.Peer(&p))
	if err != nil {
		return err
	}
	mine := "?"
	if info, ok := p.AuthInfo.(smccreds.Info); ok {
		mine = info.Mode
	}
	fmt.Printf("connection: server saw %s (smc=%t), client has %s\n", saw.Mode, saw.SMC, mine)

	var seq uint64
	for _, f := range strings.Split(sizeList, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || size < bulk.HeaderSize || size > bulk.MaxPattern {
			return fmt.Errorf("size %q: want %d..%d bytes", f, bulk.HeaderSize, bulk.MaxPattern)
		}
		e := c.Exchanger(size)
		lat := make([]time.Duration, 0, calls)
		for range calls {
			t0 := time.Now()
			if err := e.Exchange(ctx, seq); err != nil {
				return fmt.Errorf("calling Exchange with %d B, call %d: %w", size, seq, err)
			}
			lat = append(lat, time.Since(t0))
			seq++
		}
		slices.Sort(lat)
		fmt.Printf("Exchange %d B: %d calls, every byte checked, p50 %s, p99 %s\n",
			size, calls, lat[len(lat)/2], lat[len(lat)*99/100])
	}
	return nil
}
