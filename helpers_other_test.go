//go:build !unix

package oncekv_test

import (
	"os"
	"time"
)

// haveCPUTime: the CPU time is not measured here; see helpers_unix_test.go.
const haveCPUTime = false

func cpuTime() time.Duration { return 0 }

// killSelf ends this process at once, as SIGKILL would on Unix.
func killSelf() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
}

// diskBytes: the disk space a file takes is not measured here; see
// helpers_unix_test.go.
func diskBytes(os.FileInfo) int64 { return 0 }
