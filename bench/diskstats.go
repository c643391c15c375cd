package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// diskCounters are the counters of one block device from /proc/diskstats.
type diskCounters struct {
	flushes      uint64 // flush requests completed (the 16th field after the name)
	sectorsWrite uint64 // sectors written, 512 bytes each
}

func (a diskCounters) sub(b diskCounters) diskCounters {
	return diskCounters{a.flushes - b.flushes, a.sectorsWrite - b.sectorsWrite}
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
