package clc

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadMsgSequence(t *testing.T) {
	prop, _ := propV2DOnly(t)
	decl := NewDecline(DeclNoSMCD2Dev, 2).Append(nil)
	r := bytes.NewReader(cat(prop, decl))
	buf := make([]byte, 0, MaxProposalLen)

	typ, msg, err := ReadMsg(r, TypeProposal, buf)
	require.NoError(t, err)
	assert.Equal(t, TypeProposal, typ)
	assert.Same(t, &buf[:1][0], &msg[0], "buffer not reused")
	assert.Equal(t, prop, msg)

	// A Decline is always acceptable, whatever was expected.
	typ, msg, err = ReadMsg(r, TypeAccept, nil)
	require.NoError(t, err)
	assert.Equal(t, TypeDecline, typ)
	assert.Equal(t, decl, msg)
	d, err := Parse(msg)
	require.NoError(t, err)
	require.IsType(t, &Decline{}, d)
	assert.Equal(t, DeclNoSMCD2Dev, d.(*Decline).Code, "decline %+v", d)

	// Clean end of stream before a message: io.EOF.
	_, _, err = ReadMsg(r, TypeAccept, nil)
	assert.ErrorIs(t, err, io.EOF)
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
			assert.Nil(t, msg, "message returned with error")
			mustField(t, err, tc.field)
			assert.Equal(t, len(tc.msg)-HeaderLen, r.Len(), "bytes left: nothing beyond the header is consumed")
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
	require.NoError(t, err)
	assert.Equal(t, TypeDecline, typ)
	assert.Len(t, msg, DeclineLenV1)
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
			require.NoError(t, err)
			assert.Equal(t, TypeDecline, typ, "next message")
			assert.Equal(t, next, msg)

			// Truncated while draining.
			_, _, err = ReadMsg(bytes.NewReader(big[:len(big)-1]), tc.typ, nil)
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		})
	}
}

func TestReadMsgTruncated(t *testing.T) {
	prop, _ := propV2DOnly(t)
	for _, n := range []int{1, 7, 8, 9, 100, len(prop) - 1} {
		_, msg, err := ReadMsg(bytes.NewReader(prop[:n]), TypeProposal, nil)
		assert.Nil(t, msg, "%d bytes", n)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "%d bytes", n)
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
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "%d bytes", n)
		assert.NotErrorIs(t, err, ErrProtocol, "%d bytes", n)
	}
}
