//go:build !linux

package bench

import "time"

// processCPU is not measured here: the live benchmarks then leave out the
// cpu-µs/op metric.
func processCPU() (time.Duration, bool) { return 0, false }
