//go:build !linux

package ism_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/smcloop/smcloop/ism"
)

func TestOpenUnsupported(t *testing.T) {
	d, err := ism.Open(ism.Config{})
	assert.Nil(t, d)
	assert.ErrorIs(t, err, ism.ErrUnsupported)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}
