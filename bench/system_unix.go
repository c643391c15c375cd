//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// device finds the block device that holds dir, as named in /proc/diskstats:
// the whole disk when dir is on a partition, since flushes are counted on
// the disk.
func device(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)))
	p, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return "", fmt.Errorf("no block device behind %s (%s): %w", dir, sys, err)
	}
	if _, err := os.Stat(filepath.Join(p, "partition")); err == nil {
		p = filepath.Dir(p)
	}
	return filepath.Base(p), nil
}

// dirBytes is the space allocated to the files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			return err
		}
		n += st.Blocks * 512
		return nil
	})
	return n, err
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	return unix.ByteSliceToString(u.Release[:])
}
