package smcr

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/smcloop/smcloop/cdc"
	"github.com/smcloop/smcloop/internal/datapath"
)

const (
	readerDir = datapath.Reader
	writerDir = datapath.Writer
)

func cdcCursor(wrap uint16, count uint32) cdc.Cursor { return cdc.Cursor{Wrap: wrap, Count: count} }

func consOf(c cdc.Cursor, pf, cf byte) datapath.Cons {
	return datapath.Cons{Cursor: c, ProdFlags: cdc.ProdFlags(pf), ConnFlags: cdc.ConnFlags(cf)}
}

func assertDeadline(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
}
