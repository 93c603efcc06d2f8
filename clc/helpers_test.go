package clc

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hx decodes hex, ignoring blanks, so vectors can be written field by field.
func hx(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err, "bad hex %q", s)
	return b
}

func zeros(n int) []byte { return make([]byte, n) }

// blank returns s padded with blanks to n bytes.
func blank(s string, n int) []byte { return []byte(s + strings.Repeat(" ", n-len(s))) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func eid32(s string) (e [EIDLen]byte) {
	copy(e[:], blank(s, EIDLen))
	return e
}

// mustField checks that err matches ErrProtocol and is a *FieldError for
// field (empty field: any).
func mustField(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, ErrProtocol)
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	if field != "" {
		require.Equal(t, field, fe.Field, "field of %v", err)
	}
}

// patch returns a copy of b with bytes at off replaced by v.
func patch(b []byte, off int, v ...byte) []byte {
	c := bytes.Clone(b)
	copy(c[off:], v)
	return c
}

// withLen returns a copy of b with the header length set to n.
func withLen(b []byte, n int) []byte { return patch(b, 5, byte(n>>8), byte(n)) }
