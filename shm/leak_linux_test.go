package shm_test

import (
	"testing"

	"github.com/smcloop/smcloop/shm"
	"github.com/smcloop/smcloop/shm/shmtest"
	"golang.org/x/sys/unix"
)

// TestNoLeaks creates, passes, maps and closes regions and doorbells many
// times and checks that descriptors and mappings return to where they were.
func TestNoLeaks(t *testing.T) {
	const name = "shm-test-leak"
	a, b := socketPair(t, unix.SOCK_SEQPACKET)
	buf := make([]byte, 16)

	cycle := func() {
		r, err := shm.NewRegion(name, page)
		if err != nil {
			t.Fatalf("NewRegion: %v", err)
		}
		d, err := shm.NewDoorbell()
		if err != nil {
			t.Fatalf("NewDoorbell: %v", err)
		}
		if err := shm.SendFds(a, []byte("r"), r.Fd(), d.Fd()); err != nil {
			t.Fatalf("SendFds: %v", err)
		}
		_, fds, err := shm.RecvFds(b, buf, 2)
		if err != nil {
			t.Fatalf("RecvFds: %v", err)
		}
		m, err := shm.MapRegion(fds[0], page)
		if err != nil {
			t.Fatalf("MapRegion: %v", err)
		}
		pd, err := shm.DoorbellFromFd(fds[1])
		if err != nil {
			t.Fatalf("DoorbellFromFd: %v", err)
		}
		m.Bytes()[0] = 1
		if err := pd.Ring(); err != nil {
			t.Fatalf("Ring: %v", err)
		}
		if err := d.Wait(); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if r.Bytes()[0] != 1 {
			t.Fatal("write through the received mapping not seen")
		}
		// A refused region must not leak either.
		if _, err := shm.MapRegion(dupFd(t, r.Fd()), 2*page); err == nil {
			t.Fatal("MapRegion with the wrong size succeeded")
		}
		for _, c := range []interface{ Close() error }{m, pd, r, d} {
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
	}

	cycle() // let the runtime set up its poller before taking the baseline
	fds0, maps0 := shmtest.OpenFDs(t), countMappings(t, name)
	for range 200 {
		cycle()
	}
	if fds, maps := shmtest.OpenFDs(t), countMappings(t, name); fds != fds0 || maps != maps0 {
		t.Errorf("after 200 cycles: %d descriptors and %d mappings, want %d and %d", fds, maps, fds0, maps0)
	}
}
