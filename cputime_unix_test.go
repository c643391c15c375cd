//go:build unix

package oncekv_test

import (
	"syscall"
	"time"
)

// haveCPUTime says whether cpuTime measures anything on this platform.
const haveCPUTime = true

// cpuTime is the CPU time, user and system, the process has used so far:
// on a machine shared with other work, the open benchmarks report it next
// to the wall time, which waits for the CPU as much as it uses it.
// Getrusage fails only on a bad argument, which this is not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
