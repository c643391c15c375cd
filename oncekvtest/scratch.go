package oncekvtest

import (
	"os"
	"testing"
)

// memoryDir is where scratchDir puts the runs' stores when it can: a
// fresh store costs a few fsyncs, which a tmpfs makes free, and rapid
// runs a property thousands of times while it shrinks.
const memoryDir = "/dev/shm"

// scratchDir returns a directory for t's runs, removed when t ends: under
// memoryDir when it is a writable directory, else t.TempDir().
func scratchDir(t testing.TB) string {
	if fi, err := os.Stat(memoryDir); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp(memoryDir, "oncekvtest-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}
