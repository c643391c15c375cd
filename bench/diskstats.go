package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// diskCounters are the counters of one block device from /proc/diskstats.
type diskCounters struct {
	flushes      uint64 // flush requests completed (the 16th field after the name)
	sectorsWrite uint64 // sectors written, 512 bytes each
}

func (a diskCounters) sub(b diskCounters) diskCounters {
	return diskCounters{a.flushes - b.flushes, a.sectorsWrite - b.sectorsWrite}
}

// device finds the block device that holds dir, as named in /proc/diskstats:
// the whole disk when dir is on a partition, since flushes are counted on
// the disk.
func device(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	p, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return "", fmt.Errorf("no block device behind %s (%s): %w", dir, sys, err)
	}
	if _, err := os.Stat(filepath.Join(p, "partition")); err == nil {
		p = filepath.Dir(p)
	}
	return filepath.Base(p), nil
}

// readDisk returns dev's counters; the zero value when dev is empty (no
// block device: the figures then read 0 and the report says so).
func readDisk(dev string) diskCounters {
	if dev == "" {
		return diskCounters{}
	}
	f, err := os.Open("/proc/diskstats")
	if err != nil {
		return diskCounters{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || fs[2] != dev {
			continue
		}
		var c diskCounters
		fmt.Sscan(fs[9], &c.sectorsWrite)
		if len(fs) > 18 {
			fmt.Sscan(fs[18], &c.flushes)
		}
		return c
	}
	return diskCounters{}
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

// procIO is this process's own write counters from /proc/self/io: free of
// other processes' noise, but blind to a server's writes (PostgreSQL).
type procIO struct {
	wchar uint64 // bytes passed to write calls
	syscw uint64 // write calls
}

func (a procIO) sub(b procIO) procIO { return procIO{a.wchar - b.wchar, a.syscw - b.syscw} }

func readProcIO() procIO {
	var p procIO
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return p
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		switch k {
		case "wchar":
			fmt.Sscan(v, &p.wchar)
		case "syscw":
			fmt.Sscan(v, &p.syscw)
		}
	}
	return p
}
