package shm

import (
	"bytes"
	"os"
)

// OpenFDs returns the number of entries in /proc/self/fd: the descriptors
// this process has open, including the one used to list them. Compare two
// counts taken the same way to detect a leak.
func OpenFDs() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	return len(names), nil
}

// CountMappings returns the number of lines of /proc/self/maps that contain
// substr. A memfd mapping shows as "/memfd:<name> (deleted)".
func CountMappings(substr string) (int, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range bytes.Lines(maps) {
		if bytes.Contains(line, []byte(substr)) {
			n++
		}
	}
	return n, nil
}
