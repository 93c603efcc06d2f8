package verbs

import (
	"fmt"
	"sync"
)

// Mem is memory a memory region can cover: an anonymous private mapping outside the Go
// heap, so its address never changes and the garbage collector never looks at it (the
// device writes into it behind Go's back). Its length is a whole number of pages.
type Mem struct {
	mu sync.Mutex
	b  []byte
}

// NewMem maps size bytes, rounded up to whole pages, zeroed (mmap(2) MAP_PRIVATE |
// MAP_ANONYMOUS). size must be positive.
func NewMem(size int) (*Mem, error) {
	if size <= 0 {
		return nil, &Error{Op: "mmap", Err: fmt.Errorf("size %d: %w", size, errInval)}
	}
	b, err := mapAnon(size)
	if err != nil {
		return nil, &Error{Op: "mmap", Err: err}
	}
	return &Mem{b: b}, nil
}

// Bytes is the mapped memory; nil after Close.
func (m *Mem) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.b
}

// Addr is the address of the first byte, as memory regions and SGEs name it; 0 after
// Close.
func (m *Mem) Addr() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b == nil {
		return 0
	}
	return addrOf(m.b)
}

// Len is the mapped length in bytes.
func (m *Mem) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.b)
}

// Close unmaps the memory. Every memory region over it must be closed first; Close is
// idempotent.
func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b == nil {
		return nil
	}
	err := unmap(m.b)
	m.b = nil
	if err != nil {
		return &Error{Op: "munmap", Err: err}
	}
	return nil
}
