package presence

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"

	"github.com/smcloop/smcloop/internal/backoff"
	"github.com/smcloop/smcloop/internal/peercred"
)

// The signal for unix stream sockets (docs/CAPABILITY.md). A unix client socket has no
// port to announce in a table, but it can carry a name: so both halves of the signal are
// names in the abstract namespace.
//
//   - The listener holds "@smcloop-lu/<key>" while it listens, a SOCK_SEQPACKET listening
//     socket whose connections it closes at once. The key names the listening socket,
//     not its path: "f/<dev>/<inode>" of the socket file (a later socket at the same
//     path has another inode), or "a/<hash>" of an abstract address.
//   - A dialer that found a trusted listener name binds its socket to
//     "@smcloop-uc/<random>" before connect, and speaks CLC only if the process at the
//     far end of its connection (SO_PEERCRED) is the one holding the listener name. The
//     listener expects CLC exactly from clients bound to such a name.
//
// Both decisions rest on names set up before connect, so neither side waits for a plain
// peer, and a plain server that took over the path never gets a Proposal.

const (
	unixListenerPrefix = "smcloop-lu/"
	unixClientPrefix   = "@smcloop-uc/"
)

// UnixListenerName returns the listener name (without the leading '@') for the unix
// stream listener at address: a path, or "@name" for an abstract address. A path that
// is not a socket has none.
func UnixListenerName(address string) (string, error) {
	if strings.HasPrefix(address, "@") {
		sum := sha256.Sum256([]byte(address))
		return unixListenerPrefix + "a/" + hex.EncodeToString(sum[:16]), nil
	}
	dev, ino, err := socketFile(address)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%sf/%x/%x", unixListenerPrefix, dev, ino), nil
}

// UnixAdvert is a unix listener's capability signal.
type UnixAdvert struct {
	name string
	ln   *net.UnixListener
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// AdvertiseUnix holds the listener name of the unix listener at address until Close.
// It fails with an error wrapping EADDRINUSE if another socket holds the name.
func AdvertiseUnix(address string) (*UnixAdvert, error) {
	if !supported {
		return nil, fmt.Errorf("presence: advertising unix %s: %w", address, ErrUnsupported)
	}
	name, err := UnixListenerName(address)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + name, Net: "unixpacket"})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("presence: advertising unix %s: name %s is held by another socket (another smcloop listener on this socket?): %w", address, name, err)
		}
		return nil, fmt.Errorf("presence: advertising unix %s on @%s: %w", address, name, err)
	}
	a := &UnixAdvert{name: name, ln: ln, done: make(chan struct{})}
	a.wg.Add(1)
	go a.acceptProbes()
	return a, nil
}

// Name is the advertised listener name (without the leading '@').
func (a *UnixAdvert) Name() string { return a.name }

// acceptProbes closes every connection to the name: a dialer learns all it needs from
// connecting (the name exists) and from SO_PEERCRED (who holds it).
func (a *UnixAdvert) acceptProbes() {
	defer a.wg.Done()
	var retry backoff.Backoff
	for {
		c, err := a.ln.AcceptUnix()
		if err == nil {
			retry.Reset()
			c.Close()
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if !retry.Wait(a.done) {
			return
		}
	}
}

// Close releases the name and waits for its accept loop.
func (a *UnixAdvert) Close() error {
	var err error
	a.once.Do(func() {
		err = a.ln.Close()
		close(a.done)
		a.wg.Wait()
	})
	return err
}

// Withdraw, Restore and Probe are LimitHandshake's controls; a unix listener's signal
// has no withdrawn state (its dialers do not look at one), so they do nothing.
func (a *UnixAdvert) Withdraw()      {}
func (a *UnixAdvert) Restore()       {}
func (a *UnixAdvert) Probe(n uint32) {}

// LookupUnix returns the pid of the trusted process that advertises a listener for the
// unix address, or 0 if none does (no name, a name of another user, an address that is
// not a socket).
func LookupUnix(ctx context.Context, address string) int32 {
	if !supported {
		return 0
	}
	name, err := UnixListenerName(address)
	if err != nil {
		return 0
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", "@"+name)
	if err != nil {
		return 0
	}
	defer c.Close()
	cred, err := peercred.UnixPeer(c.(*net.UnixConn))
	if err != nil || !peercred.Trusted(cred.UID) {
		return 0
	}
	return cred.PID
}

// UnixClientAddr returns a fresh abstract name for a dialing socket that will speak CLC.
func UnixClientAddr() *net.UnixAddr {
	var b [12]byte
	rand.Read(b[:])
	return &net.UnixAddr{Name: unixClientPrefix + hex.EncodeToString(b[:]), Net: "unix"}
}

// UnixAnnounced reports whether an accepted unix connection's client is bound to a name
// that announces CLC (UnixClientAddr).
func UnixAnnounced(remote net.Addr) bool {
	ra, ok := remote.(*net.UnixAddr)
	return ok && strings.HasPrefix(ra.Name, unixClientPrefix)
}
