//go:build linux

package scenario

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used so
// far; the runs report it per op, which says what the client costs even
// when the broker, not the client, bounds the rate.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
