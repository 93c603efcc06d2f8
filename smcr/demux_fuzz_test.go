package smcr

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/internal/verbs"
	"github.com/smcloop/smcloop/internal/verbs/verbstest"
)

// FuzzParseRecv: no received message panics the demultiplexer, exactly one of CDC and
// LLC comes back on success, and what parses re-encodes to the bytes it came from.
func FuzzParseRecv(f *testing.F) {
	f.Add(cdcBytes(1, 2, 3, 4, 5, 6, 7, 8))
	for _, v := range llcVectors(f) {
		f.Add(v.msg)
	}
	f.Add([]byte{})
	f.Add([]byte{0xFE})
	f.Fuzz(func(t *testing.T, msg []byte) {
		rx, err := ParseRecv(msg)
		if err != nil {
			require.Nil(t, rx.CDC)
			require.Nil(t, rx.LLC)
			return
		}
		require.True(t, (rx.CDC == nil) != (rx.LLC == nil), "one kind")
		if rx.CDC != nil {
			again, err := ParseCDC(rx.CDC.Append(nil))
			require.NoError(t, err)
			require.Equal(t, rx.CDC, again)
			return
		}
		b, err := rx.LLC.Append(nil)
		require.NoError(t, err)
		again, err := ParseLLC(b)
		require.NoError(t, err)
		require.Equal(t, rx.LLC, again)
	})
}

// FuzzHandle feeds one received message to a link group with one connection, as its
// goroutine would: nothing panics, whatever the message does to the group, and closing
// the group releases every verbs object.
func FuzzHandle(f *testing.F) {
	f.Add(cdcBytes(1, 1, 0, 10, 0, 0, 0, 0))
	for _, v := range llcVectors(f) {
		f.Add(v.msg)
	}
	fab := verbstest.NewFabric()
	h, err := fab.NewHost(verbstest.HostConfig{Device: "rxe0", IP: net.IPv4(10, 9, 0, 1)})
	require.NoError(f, err)
	d, err := OpenDevice(h, "")
	require.NoError(f, err)
	f.Cleanup(func() { d.Close() })
	f.Fuzz(func(t *testing.T, msg []byte) {
		g, err := d.NewLinkGroup(GroupConfig{Role: Client, LLCTimeout: time.Millisecond, SlotWait: time.Millisecond})
		require.NoError(t, err)
		c, err := g.NewConn(ConnConfig{RMBSize: 16 << 10, FirstContact: true})
		require.NoError(t, err)
		g.handle(msg)
		_ = c.PeerProd()
		c.Close(true)
		g.Close()
		require.Equal(t, verbs.Counts{}, d.Live())
	})
}
