//go:build !unix

package verbs

import "errors"

// Without mmap(2) there is no memory a region could cover; no verbs binding exists here
// either.
func mapAnon(int) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmap([]byte) error { return nil }

func addrOf([]byte) uint64 { return 0 }
