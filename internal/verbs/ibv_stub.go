//go:build !(linux && cgo && rdma)

package verbs

// Built without the libibverbs binding: no device exists.

const bindingAvailable = false

type system struct{}

func (system) Devices() ([]string, error) { return nil, nil }

func (system) Open(name string) (Device, error) {
	return nil, &Error{Op: "ibv_open_device", Err: ErrNoDevice}
}
