//go:build !unix

package oncekv_test

import "time"

// haveCPUTime: the CPU time is not measured here; see cputime_unix_test.go.
const haveCPUTime = false

func cpuTime() time.Duration { return 0 }
