//go:build !linux

package shm_test

import (
	"errors"
	"testing"

	"github.com/smcloop/smcloop/shm"
)

func TestUnsupported(t *testing.T) {
	if _, err := shm.NewRegion("x", 4096); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewRegion: %v, want ErrUnsupported", err)
	}
	if _, err := shm.NewDoorbell(); !errors.Is(err, shm.ErrUnsupported) {
		t.Errorf("NewDoorbell: %v, want ErrUnsupported", err)
	}
}
