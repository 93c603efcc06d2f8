//go:build !linux

package wakeprobe

// Measure measures nothing on this system: it needs Linux's futex(2) and getcpu(2).
func Measure(n int) Result {
	return Result{Note: "not measured: needs Linux"}
}
