package bench

import (
	"os"
	"runtime"
)

// machineInfo describes this machine for the report.
func machineInfo() Machine {
	host, _ := os.Hostname()
	return Machine{
		Hostname:   host,
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		GoVersion:  runtime.Version(),
		Kernel:     kernelRelease(),
		CPUModel:   cpuModel(),
	}
}
