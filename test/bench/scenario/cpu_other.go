//go:build !linux

package scenario

import "time"

// processCPU is not measured here: Result.CPUOK is then false and the CPU
// figures are left out.
func processCPU() (time.Duration, bool) { return 0, false }
