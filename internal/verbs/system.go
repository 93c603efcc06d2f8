package verbs

// System is the host's verbs: libibverbs when the module is built with the rdma tag on
// Linux with cgo (see docs/VERBS.md), otherwise a binding with no device, whose Devices
// is empty and whose Open fails with an error matching ErrNoDevice.
func System() Provider { return system{} }

// Available reports whether this build carries the libibverbs binding (the rdma tag on
// Linux with cgo). Even then a host may have no device.
func Available() bool { return bindingAvailable }
