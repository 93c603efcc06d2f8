package verbs

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMTU(t *testing.T) {
	for m, want := range map[MTU]int{0: 0, MTU256: 256, MTU512: 512, MTU1024: 1024, MTU2048: 2048, MTU4096: 4096, 6: 0} {
		assert.Equal(t, want, m.Bytes(), "%d", m)
		assert.Equal(t, want != 0, m.Valid(), "%d", m)
	}
}

func TestStrings(t *testing.T) {
	assert.Equal(t, "WR flushed", StatusWRFlushErr.String())
	assert.Equal(t, "transport retry counter exceeded", StatusRetryExcErr.String())
	assert.Equal(t, "tag matching rendezvous incomplete", StatusTMRndvIncomplete.String())
	assert.Equal(t, "WCStatus(24)", WCStatus(24).String())
	assert.Equal(t, "ERR", QPErr.String())
	assert.Equal(t, "QPState(7)", QPState(7).String())
	assert.Equal(t, "ACTIVE", PortActive.String())
	assert.Equal(t, "PortState(9)", PortState(9).String())
	assert.Equal(t, "RoCE v2", GIDTypeRoCEv2.String())
	assert.Equal(t, "GIDType(3)", GIDType(3).String())
	assert.Equal(t, "RDMA_WRITE", OpRDMAWrite.String())
	assert.Equal(t, "Opcode(1)", Opcode(1).String())
	assert.Equal(t, "RECV", WCRecv.String())
	assert.Equal(t, "WCOpcode(2)", WCOpcode(2).String())
	g := GID{10: 0xff, 11: 0xff, 12: 10, 15: 1}
	assert.Equal(t, "10.0.0.1", g.String())
	assert.False(t, g.IsZero())
	assert.True(t, GID{}.IsZero())
}

func TestErrors(t *testing.T) {
	err := error(&Error{Op: "ibv_post_send", Err: syscall.EAGAIN})
	assert.ErrorIs(t, err, syscall.EAGAIN)
	assert.Equal(t, "verbs: ibv_post_send: resource temporarily unavailable", err.Error())

	wc := WC{ID: 3, Status: StatusWRFlushErr, QPN: 0x11}
	assert.ErrorIs(t, wc.Err(), ErrFlushed)
	assert.Equal(t, "verbs: work request 3 on QP 0x11: WR flushed (status 5, vendor error 0x0)", wc.Err().Error())
	assert.NotErrorIs(t, WC{Status: StatusRemAccessErr}.Err(), ErrFlushed)
	assert.NoError(t, WC{}.Err())
}

func TestCheckSendWR(t *testing.T) {
	for _, wr := range []*SendWR{
		{Opcode: 1},
		{Opcode: OpSend, Inline: []byte("x"), SGE: []SGE{{}}},
		{Opcode: OpSend, Inline: make([]byte, 45)},
	} {
		err := CheckSendWR(wr, 44)
		assert.ErrorIs(t, err, syscall.EINVAL)
		var ve *Error
		require.True(t, errors.As(err, &ve))
		assert.Equal(t, "ibv_post_send", ve.Op)
	}
	assert.NoError(t, CheckSendWR(&SendWR{Opcode: OpRDMAWrite, SGE: []SGE{{}}}, 0))
	assert.NoError(t, CheckSendWR(&SendWR{Opcode: OpSend, Inline: make([]byte, 44)}, 44))
}

func TestPortAttrGID(t *testing.T) {
	a := PortAttr{GIDs: []GIDEntry{
		{Index: 0, Type: GIDTypeRoCEv2},
		{Index: 1, Type: GIDTypeRoCEv1, GID: GID{0: 0xfe, 1: 0x80, 15: 1}},
		{Index: 2, Type: GIDTypeRoCEv2, GID: GID{10: 0xff, 11: 0xff, 12: 10, 15: 2}},
	}}
	e, ok := a.GID(GIDTypeRoCEv2)
	require.True(t, ok)
	assert.Equal(t, uint32(2), e.Index, "a zero GID is no GID")
	e, ok = a.GID(GIDTypeRoCEv1)
	require.True(t, ok)
	assert.Equal(t, uint32(1), e.Index)
	_, ok = a.GID(GIDTypeIB)
	assert.False(t, ok)
}

func TestRTRDefaults(t *testing.T) {
	assert.Equal(t, RTRAttr{MaxDestRdAtomic: 1, MinRNRTimer: 5}, RTRAttr{}.WithDefaults())
	assert.Equal(t, RTRAttr{MaxDestRdAtomic: 2, MinRNRTimer: 9}, RTRAttr{MaxDestRdAtomic: 2, MinRNRTimer: 9}.WithDefaults())
}

func TestMem(t *testing.T) {
	_, err := NewMem(0)
	assert.ErrorIs(t, err, syscall.EINVAL)
	m, err := NewMem(1)
	require.NoError(t, err)
	assert.Equal(t, os.Getpagesize(), m.Len(), "whole pages")
	assert.Equal(t, make([]byte, m.Len()), m.Bytes(), "zeroed")
	assert.NotZero(t, m.Addr())
	assert.Zero(t, m.Addr()%uint64(os.Getpagesize()))
	m.Bytes()[0] = 1
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "idempotent")
	assert.Nil(t, m.Bytes())
	assert.Zero(t, m.Addr())
}
