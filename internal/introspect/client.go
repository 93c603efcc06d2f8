//go:build linux

package introspect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/smcloop/smcloop/shm"
)

// MaxResponse bounds a response a client reads.
const MaxResponse = 256 << 20

// ErrDenied is returned for a process the caller may not query: the process refused
// (another user's), or, seen from the client, its endpoint belongs to another user.
var ErrDenied = errors.New("permission denied")

// ErrBusy is returned when the process was answering MaxQueries queries already.
var ErrBusy = errors.New("busy")

// Dial connects to process pid's endpoint and checks that pid holds it: a name held by
// another process (a squatter) is refused. It returns the connection and the server's
// uid.
func Dial(ctx context.Context, pid int) (*net.UnixConn, uint32, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", Name(pid))
	if err != nil {
		return nil, 0, err
	}
	uc := c.(*net.UnixConn)
	cred, err := shm.PeerCred(uc)
	if err != nil {
		uc.Close()
		return nil, 0, err
	}
	if int(cred.Pid) != pid {
		uc.Close()
		return nil, 0, fmt.Errorf("%s is held by pid %d, not %d", Name(pid), cred.Pid, pid)
	}
	return uc, cred.Uid, nil
}

// Ask sends req on c, reads the response and closes c. A refusal is an error wrapping
// ErrDenied, ErrBusy or describing the bad request.
func Ask(ctx context.Context, c *net.UnixConn, req Request) (*Response, error) {
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req.V = Version
	b, _ := json.Marshal(req)
	// A refusal may come before the request is read, and the server closes: the write
	// then fails, and the refusal is still there to read.
	_, werr := c.Write(append(b, '\n'))
	line, err := bufio.NewReader(io.LimitReader(c, MaxResponse)).ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if werr != nil {
			return nil, fmt.Errorf("sending the request: %w", werr)
		}
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, fmt.Errorf("bad answer: %w", err)
	}
	switch resp.Error {
	case "":
	case ErrCodeDenied:
		return nil, fmt.Errorf("%w (refused by the process)", ErrDenied)
	case ErrCodeBusy:
		return nil, ErrBusy
	default:
		return nil, fmt.Errorf("%s: %s", resp.Error, resp.Message)
	}
	if resp.V != Version {
		return nil, fmt.Errorf("answer of protocol version %d, want %d", resp.V, Version)
	}
	return &resp, nil
}

// Query asks process pid. Unless the caller is root, a process of another uid is not
// asked at all (ErrDenied): it would refuse, and an impostor could answer anything.
func Query(ctx context.Context, pid int, req Request) (*Response, error) {
	c, uid, err := Dial(ctx, pid)
	if err != nil {
		return nil, err
	}
	if me := os.Geteuid(); me != 0 && uid != uint32(me) && uid != uint32(os.Getuid()) {
		c.Close()
		return nil, fmt.Errorf("%w (the process belongs to uid %d)", ErrDenied, uid)
	}
	return Ask(ctx, c, req)
}

// Discover returns the pids of the processes with a listening endpoint in this network
// namespace, from /proc/net/unix, in ascending order.
func Discover() ([]int, error) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	return parseUnixTable(b), nil
}

// parseUnixTable finds the listening endpoints in the text of /proc/net/unix: "Num
// RefCount Protocol Flags Type St Inode Path", Flags with __SO_ACCEPTCON (1<<16) for a
// listening socket, the abstract Path with a leading '@'.
func parseUnixTable(b []byte) []int {
	seen := map[int]bool{}
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		if len(f) < 8 {
			continue
		}
		flags, err := strconv.ParseUint(f[3], 16, 32)
		if err != nil || flags&(1<<16) == 0 {
			continue
		}
		rest, ok := strings.CutPrefix(f[7], "@"+NamePrefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(rest)
		if err != nil || pid <= 0 || strconv.Itoa(pid) != rest {
			continue
		}
		seen[pid] = true
	}
	pids := make([]int, 0, len(seen))
	for p := range seen {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	return pids
}
