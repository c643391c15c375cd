//go:build unix

package oncekv_test

import (
	"os"
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

// killSelf sends this process SIGKILL: a workload child dies of it at its
// crash point.
func killSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }

// diskBytes is the disk space the file st describes takes, in bytes: its
// blocks, which a sparse file has fewer of than its length says.
func diskBytes(st os.FileInfo) int64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512
	}
	return 0
}
