//go:build !unix

package bench

// readCPU is zero where getrusage is missing: the CPU columns then stay empty.
func readCPU() cpuTime { return cpuTime{} }
