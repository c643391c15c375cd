//go:build !unix

package main

import (
	"os"
	"path/filepath"
	"runtime"
)

// device finds no block device off Unix: the disk figures then read 0 and
// the report says so.
func device(string) (string, error) { return "", nil }

// dirBytes is the size of the files under dir: their allocated space is
// not read off Unix.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

// kernelRelease names the system: uname is Unix's.
func kernelRelease() string { return runtime.GOOS }
