package clc

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// hx decodes hex, ignoring blanks, so vectors can be written field by field.
func hx(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
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

func mustEqual(t *testing.T, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("\ngot  %+v\nwant %+v", got, want)
	}
}

func mustBytes(t *testing.T, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("bytes differ\ngot  (%d) % x\nwant (%d) % x", len(got), got, len(want), want)
	}
}

func mustNoErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// mustField checks that err matches ErrProtocol and is a *FieldError for
// field (empty field: any).
func mustField(t *testing.T, err error, field string) {
	t.Helper()
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("error %v does not match ErrProtocol", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a *FieldError", err)
	}
	if field != "" && fe.Field != field {
		t.Fatalf("error %v: field %q, want %q", err, fe.Field, field)
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
