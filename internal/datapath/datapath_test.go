package datapath_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/smcloop/smcloop/internal/datapath"
)

func TestDirString(t *testing.T) {
	for d, want := range map[datapath.Dir]string{
		0:                                 "none",
		datapath.Reader:                   "reader",
		datapath.Writer:                   "writer",
		datapath.Reader | datapath.Writer: "reader|writer",
		datapath.Dir(8):                   "Dir(8)",
	} {
		assert.Equal(t, want, d.String())
	}
}
