package umltest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/smcloop/smcloop/internal/backoff"
)

// The environment run.sh gives the command in each instance.
const (
	envEnabled   = "UMLTEST"           // "1" inside an instance
	envRole      = "UMLTEST_ROLE"      // RoleServer or RoleClient
	envIndex     = "UMLTEST_INDEX"     // 1 or 2
	envInstances = "UMLTEST_INSTANCES" // 1 or 2
	envAddr      = "UMLTEST_ADDR"      // this instance's eth0 address
	envPeer      = "UMLTEST_PEER"      // the other instance's address, empty with one
	envOut       = "UMLTEST_OUT"       // this instance's writable directory, kept by the host
)

// The roles of the instances: instance 1 (10.0.0.1) is the server, instance 2 (10.0.0.2)
// the client.
const (
	RoleServer = "server"
	RoleClient = "client"
)

// Env describes the instance a process runs in.
type Env struct {
	Role      string // RoleServer or RoleClient
	Index     int    // 1 or 2
	Instances int    // how many instances the run has: 1 or 2
	Addr      string // this instance's address on eth0, where rxe0 is
	Peer      string // the other instance's address; empty when Instances is 1
	Out       string // a writable directory the host keeps after the run (Result.Dir)
}

// ErrNotInUML is Current's error outside a UML instance of the rig.
var ErrNotInUML = errors.New("umltest: not running inside a UML instance (UMLTEST is not 1)")

// Enabled reports whether the process runs inside a UML instance started by run.sh.
func Enabled() bool { return os.Getenv(envEnabled) == "1" }

// Current returns the instance's description from the environment run.sh set. Outside an
// instance it returns ErrNotInUML; an environment that is not one run.sh writes is an error
// naming the variable.
func Current() (Env, error) {
	if !Enabled() {
		return Env{}, ErrNotInUML
	}
	return parseEnv(os.Getenv)
}

func parseEnv(get func(string) string) (Env, error) {
	e := Env{Role: get(envRole), Addr: get(envAddr), Peer: get(envPeer), Out: get(envOut)}
	var err error
	if e.Index, err = strconv.Atoi(get(envIndex)); err != nil || (e.Index != 1 && e.Index != 2) {
		return Env{}, fmt.Errorf("umltest: %s=%q, want 1 or 2", envIndex, get(envIndex))
	}
	if e.Instances, err = strconv.Atoi(get(envInstances)); err != nil || (e.Instances != 1 && e.Instances != 2) || e.Index > e.Instances {
		return Env{}, fmt.Errorf("umltest: %s=%q with %s=%d, want 1 or 2, at least the index", envInstances, get(envInstances), envIndex, e.Index)
	}
	if want := [...]string{RoleServer, RoleClient}[e.Index-1]; e.Role != want {
		return Env{}, fmt.Errorf("umltest: %s=%q for instance %d, want %q", envRole, e.Role, e.Index, want)
	}
	if ip := net.ParseIP(e.Addr); ip == nil || ip.To4() == nil {
		return Env{}, fmt.Errorf("umltest: %s=%q, want an IPv4 address", envAddr, e.Addr)
	}
	if e.Instances == 2 {
		if ip := net.ParseIP(e.Peer); ip == nil || ip.To4() == nil || e.Peer == e.Addr {
			return Env{}, fmt.Errorf("umltest: %s=%q, want the other instance's IPv4 address", envPeer, e.Peer)
		}
	} else if e.Peer != "" {
		return Env{}, fmt.Errorf("umltest: %s=%q with one instance, want it empty", envPeer, e.Peer)
	}
	if e.Out == "" {
		return Env{}, fmt.Errorf("umltest: %s is empty, want the instance's directory", envOut)
	}
	return e, nil
}

// DialPeer connects over TCP to port on the other instance, retrying while the peer's
// listener is not up yet (connection refused, host or network unreachable while the
// neighbour is resolved), with the accept loops' backoff (5 ms doubling to 1 s), until ctx
// ends. The two instances start their commands at about the same time, so this is the
// barrier a client uses before its first real connection.
func (e Env) DialPeer(ctx context.Context, port int) (net.Conn, error) {
	if e.Peer == "" {
		return nil, errors.New("umltest: DialPeer in a run with one instance")
	}
	addr := net.JoinHostPort(e.Peer, strconv.Itoa(port))
	var d net.Dialer
	var b backoff.Backoff
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, syscall.ENETUNREACH) {
			return nil, err
		}
		if !b.Wait(ctx.Done()) {
			return nil, fmt.Errorf("umltest: dial %s: %w (last error: %v)", addr, ctx.Err(), err)
		}
	}
}
