package clc

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
)

func TestReadMsgSequence(t *testing.T) {
	prop, _ := propV2DOnly(t)
	decl := NewDecline(DeclNoSMCD2Dev, 2).Append(nil)
	r := bytes.NewReader(cat(prop, decl))
	buf := make([]byte, 0, MaxProposalLen)

	typ, msg, err := ReadMsg(r, TypeProposal, buf)
	mustNoErr(t, err)
	if typ != TypeProposal || &msg[0] != &buf[:1][0] {
		t.Fatalf("type %v, buffer not reused", typ)
	}
	mustBytes(t, msg, prop)

	// A Decline is always acceptable, whatever was expected.
	typ, msg, err = ReadMsg(r, TypeAccept, nil)
	mustNoErr(t, err)
	if typ != TypeDecline {
		t.Fatalf("type %v", typ)
	}
	mustBytes(t, msg, decl)
	d, err := Parse(msg)
	mustNoErr(t, err)
	if d.(*Decline).Code != DeclNoSMCD2Dev {
		t.Fatalf("decline %+v", d)
	}

	// Clean end of stream before a message: io.EOF.
	_, _, err = ReadMsg(r, TypeAccept, nil)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("error %v, want io.EOF", err)
	}
}

func TestReadMsgRejectsHeader(t *testing.T) {
	m := acceptBase()
	m.Type, m.Version = TypeAccept, 2
	acc, _ := m.Append(nil)
	for _, tc := range []struct {
		name, field string
		msg         []byte
		expect      MsgType
	}{
		{"wrong type", "type", acc, TypeConfirm},
		{"unknown type expected", "type", patch(acc, 4, 9), MsgType(9)},
		{"eyecatcher", "eyecatcher", patch(acc, 1, 0), TypeAccept},
		{"version 0", "version", patch(acc, 7, 0x01), TypeAccept},
		{"length below header+trailer", "length", withLen(acc, 8), TypeAccept},
		{"accept length below 48", "length", withLen(acc, 47), TypeAccept},
		{"decline length below 28", "length", withLen(NewDecline(DeclMem, 1).Append(nil), 27), TypeAccept},
		{"proposal length below 52", "length", withLen(acc[:8], 51), TypeProposal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.expect == TypeProposal {
				tc.msg = patch(tc.msg, 4, byte(TypeProposal))
			}
			r := bytes.NewReader(tc.msg)
			_, msg, err := ReadMsg(r, tc.expect, nil)
			if msg != nil {
				t.Fatal("message returned with error")
			}
			mustField(t, err, tc.field)
			// Nothing beyond the header was consumed.
			if r.Len() != len(tc.msg)-HeaderLen {
				t.Fatalf("%d bytes left, want %d", r.Len(), len(tc.msg)-HeaderLen)
			}
		})
	}
}

func TestReadMsgTrailer(t *testing.T) {
	prop, _ := propV2DOnly(t)
	_, _, err := ReadMsg(bytes.NewReader(patch(prop, len(prop)-2, 0)), TypeProposal, nil)
	mustField(t, err, "trailer")

	// Not checked for a Decline.
	decl := NewDecline(DeclMem, 1).Append(nil)
	typ, msg, err := ReadMsg(bytes.NewReader(patch(decl, 24, 0, 0, 0, 0)), TypeProposal, nil)
	mustNoErr(t, err)
	if typ != TypeDecline || len(msg) != DeclineLenV1 {
		t.Fatalf("type %v len %d", typ, len(msg))
	}
}

func TestReadMsgOversize(t *testing.T) {
	next := NewDecline(DeclMem, 2).Append(nil)
	for _, tc := range []struct {
		typ MsgType
		n   int
	}{
		{TypeProposal, MaxProposalLen + 1},
		{TypeAccept, MaxMsgLen + 1},
		{TypeDecline, 0xFFFF},
	} {
		t.Run(tc.typ.String(), func(t *testing.T) {
			big := withLen(cat(EyecatcherR[:], []byte{byte(tc.typ), 0, 0, 0x20}, zeros(tc.n-8)), tc.n)
			r := bytes.NewReader(cat(big, next))
			_, _, err := ReadMsg(r, tc.typ, nil)
			mustField(t, err, "length")
			// The oversize message was drained: the stream is aligned.
			typ, msg, err := ReadMsg(r, TypeAccept, nil)
			mustNoErr(t, err)
			if typ != TypeDecline {
				t.Fatalf("next type %v", typ)
			}
			mustBytes(t, msg, next)

			// Truncated while draining.
			_, _, err = ReadMsg(bytes.NewReader(big[:len(big)-1]), tc.typ, nil)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v, want io.ErrUnexpectedEOF", err)
			}
		})
	}
}

func TestReadMsgTruncated(t *testing.T) {
	prop, _ := propV2DOnly(t)
	for _, n := range []int{1, 7, 8, 9, 100, len(prop) - 1} {
		_, msg, err := ReadMsg(bytes.NewReader(prop[:n]), TypeProposal, nil)
		if msg != nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%d bytes: error %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
}

// errReader returns its error after the given bytes.
type errReader struct {
	b   []byte
	err error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func TestReadMsgPassesReadErrors(t *testing.T) {
	prop, _ := propV2DOnly(t)
	for _, n := range []int{0, 4, 20} {
		_, _, err := ReadMsg(&errReader{prop[:n], os.ErrDeadlineExceeded}, TypeProposal, nil)
		if !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrProtocol) {
			t.Fatalf("%d bytes: error %v, want os.ErrDeadlineExceeded", n, err)
		}
	}
}
