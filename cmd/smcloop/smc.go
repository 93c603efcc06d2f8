package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/smcloop/smcloop"
	"github.com/smcloop/smcloop/internal/bench"
)

func init() { transportRegistrars = append(transportRegistrars, registerSMC) }

// registerSMC adds the smcloop transports: SMC-D with blocking doorbells, and with a
// 200 µs busy-poll budget. A connection that fell back to TCP is refused, so TCP figures
// can never be posted under an smcd name.
func registerSMC() {
	for _, t := range []struct {
		name string
		cfg  smcloop.Config
	}{
		{"smcd", smcloop.Config{}},                                          // defaults: doorbells, adaptive spin
		{"smcd-nospin", smcloop.Config{BusyPoll: -1}},                       // doorbells only
		{"smcd-busypoll", smcloop.Config{BusyPoll: 200 * time.Microsecond}}, // 200 µs busy-poll budget
	} {
		name, cfg := t.name, t.cfg
		bench.Register(bench.Transport{
			Name: name,
			Listen: func(ctx context.Context) (net.Listener, error) {
				lc := smcloop.ListenConfig{Config: cfg}
				return lc.Listen(ctx, "tcp", "127.0.0.1:0")
			},
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				d := smcloop.Dialer{Config: cfg}
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				if !c.UsingSMC() {
					c.Close()
					return nil, fmt.Errorf("%s: connection fell back to TCP (%s)", name, c.Mode())
				}
				return c, nil
			},
		})
	}
}
