//go:build unix

package verbs

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

func mapAnon(size int) ([]byte, error) {
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	return unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}

func unmap(b []byte) error { return unix.Munmap(b) }

// addrOf is the address of b's first byte. b is mapped memory outside the Go heap, so
// the address is stable for as long as the mapping lives.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
