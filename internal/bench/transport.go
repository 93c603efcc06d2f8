package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Transport is one way of connecting two processes on this host.
type Transport struct {
	// Name identifies the transport on the command line and to the server child:
	// "smcd", "smcd-busypoll", "tcp", "unix", ...
	Name string
	// Listen listens on a fresh address (tcp: 127.0.0.1:0, unix: a new temporary path).
	// Closing the listener releases the address.
	Listen func(ctx context.Context) (net.Listener, error)
	// Dial connects to addr, which is Listener.Addr().String() of a listener made by Listen
	// in another process.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// DefaultTransports is the order in which the CLI benchmarks transports when none are
// named; only the registered ones take part (see Defaults).
var DefaultTransports = []string{"smcd", "smcd-1m", "smcd-busypoll", "tcp", "unix"}

// registry holds the process-wide set of transports known by name. The server child
// looks transports up here, so the client and the child must register the same set
// (they run the same binary).
var registry struct {
	mu     sync.Mutex
	byName map[string]Transport
}

// Register makes t known by t.Name. It panics if t has no name, a name with a comma or
// space, no Listen or Dial, or if the name is already registered: registration is done
// once at program start, like database/sql drivers.
func Register(t Transport) {
	if t.Name == "" || strings.ContainsAny(t.Name, ", \t\n") {
		panic(fmt.Sprintf("bench: Register: invalid transport name %q", t.Name))
	}
	if t.Listen == nil || t.Dial == nil {
		panic(fmt.Sprintf("bench: Register: transport %q needs both Listen and Dial", t.Name))
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if _, dup := registry.byName[t.Name]; dup {
		panic(fmt.Sprintf("bench: Register: transport %q registered twice", t.Name))
	}
	if registry.byName == nil {
		registry.byName = make(map[string]Transport)
	}
	registry.byName[t.Name] = t
}

// Registered returns the names of all registered transports, sorted.
func Registered() []string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	names := make([]string, 0, len(registry.byName))
	for name := range registry.byName {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Defaults returns the names in DefaultTransports that are registered, in that order.
func Defaults() []string {
	var names []string
	for _, name := range DefaultTransports {
		if _, err := Lookup(name); err == nil {
			names = append(names, name)
		}
	}
	return names
}

// Lookup returns the transport registered as name. The error for an unknown name lists
// the known ones.
func Lookup(name string) (Transport, error) {
	registry.mu.Lock()
	t, ok := registry.byName[name]
	registry.mu.Unlock()
	if !ok {
		return Transport{}, fmt.Errorf("unknown transport %q (known: %s)", name, strings.Join(Registered(), ", "))
	}
	return t, nil
}

// Resolve looks up every name, in order. It fails on the first unknown or repeated name.
func Resolve(names []string) ([]Transport, error) {
	if len(names) == 0 {
		return nil, errors.New("no transports given")
	}
	out := make([]Transport, 0, len(names))
	for i, name := range names {
		if slices.Contains(names[:i], name) {
			return nil, fmt.Errorf("transport %q listed twice", name)
		}
		t, err := Lookup(name)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

var builtinsOnce sync.Once

// RegisterBuiltins registers the baselines, TCP() as "tcp" and Unix() as "unix". It may
// be called more than once.
func RegisterBuiltins() {
	builtinsOnce.Do(func() {
		Register(TCP())
		Register(Unix())
	})
}

// TCP is Go's TCP over the loopback interface (127.0.0.1, Nagle off as Go sets by default).
func TCP() Transport {
	return Transport{
		Name: "tcp",
		Listen: func(ctx context.Context) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(ctx, "tcp", "127.0.0.1:0")
		},
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
	}
}

// Unix is Go's unix stream socket on a path in a fresh temporary directory; closing the
// listener removes both.
func Unix() Transport {
	return Transport{
		Name: "unix",
		Listen: func(ctx context.Context) (net.Listener, error) {
			dir, err := os.MkdirTemp("", "smcloop-bench-")
			if err != nil {
				return nil, err
			}
			var lc net.ListenConfig
			ln, err := lc.Listen(ctx, "unix", filepath.Join(dir, "s"))
			if err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
			return &tempDirListener{Listener: ln, dir: dir}, nil
		},
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		},
	}
}

// tempDirListener removes the directory holding its socket when it is closed.
type tempDirListener struct {
	net.Listener
	dir  string
	once sync.Once
}

func (l *tempDirListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() {
		if rerr := os.RemoveAll(l.dir); err == nil {
			err = rerr
		}
	})
	return err
}
