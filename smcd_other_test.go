//go:build !linux

package smcloop

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/clc"
)

// TestNoSMCDIsPlainTCP: where SMC-D cannot work, Dial and Listen speak no CLC and
// every connection is plain TCP with reason NOSMCDEV on both sides, as the kernel's
// fallback without an SMC device; RequireSMC fails the dial with that reason.
func TestNoSMCDIsPlainTCP(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			address := "127.0.0.1:0"
			if network == "unix" {
				address = filepath.Join(t.TempDir(), "s")
			}
			ln, err := Listen(network, address)
			require.NoError(t, err)
			defer ln.Close()
			c, err := Dial(network, ln.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			s := acceptOne(t, ln)
			wantReasons(t, c, clc.DeclNoSMCDev, 0)
			wantReasons(t, s, clc.DeclNoSMCDev, 0)
			exchange(t, c, s)
			st := c.Stats()
			assert.Zero(t, st.CLCBytesSent)
			assert.Zero(t, st.CLCBytesRecv)
			assert.False(t, ln.Stats().Advertising || ln.Stats().Probing)

			d := Dialer{Config: Config{RequireSMC: true}}
			_, err = d.Dial(network, ln.Addr().String())
			var fe *FallbackError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, clc.DeclNoSMCDev, fe.Local)
		})
	}
}
