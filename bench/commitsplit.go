package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// commitsplit reads a trace of the bench taken with
//
//	strace -f -tt -T -e trace=pwrite64,fdatasync,fsync,write -o trace.txt ./bench ...
//
// cuts it into cells at the progress lines the bench writes to stderr (a
// cell's syscalls come before its result lines, which end with a "(…)"
// line), and splits each cell's bbolt commits on the file with the most
// fdatasyncs into what a commit is: the data pages' pwrites, fdatasync of
// the data, the meta page's pwrite, fdatasync of the meta. With more than
// one peer in a cell their syscalls interleave, so trace one peer.

// syscallLine matches one strace line: pid, time of day, call, first
// argument (the fd), the rest, return value and time spent in the call.
var syscallLine = regexp.MustCompile(`^\d+\s+(\d+):(\d+):([\d.]+) (\w+)\((\d+),?(.*?)\)\s+=\s+(-?\d+).*<([\d.]+)>$`)

type traceCall struct {
	at   float64 // seconds since midnight
	name string
	fd   int
	ret  int64
	took float64 // seconds
}

// traceCell is the syscalls of one cell and the names of its results.
type traceCell struct {
	names []string
	calls []traceCall
}

func parseTrace(r io.Reader) ([]traceCell, error) {
	var cells []traceCell
	var cur traceCell
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := syscallLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue // signals, resumed calls, exits
		}
		h, _ := strconv.Atoi(m[1])
		mi, _ := strconv.Atoi(m[2])
		s, _ := strconv.ParseFloat(m[3], 64)
		fd, _ := strconv.Atoi(m[5])
		ret, _ := strconv.ParseInt(m[7], 10, 64)
		took, _ := strconv.ParseFloat(m[8], 64)
		c := traceCall{at: float64(h*3600+mi*60) + s, name: m[4], fd: fd, ret: ret, took: took}
		if c.name == "write" && fd == 2 {
			line, ok := strings.CutPrefix(strings.TrimSpace(m[6]), `"bench: `)
			line, _, _ = strings.Cut(line, `"`) // strace cuts long strings: `..."...,`
			switch {
			case !ok:
			case strings.HasPrefix(line, "("):
				cells = append(cells, cur)
				cur = traceCell{}
			default:
				cur.names = append(cur.names, strings.TrimSpace(line))
			}
			continue
		}
		cur.calls = append(cur.calls, c)
	}
	if len(cur.calls) > 0 {
		// A trace of something other than the bench (a go test binary)
		// has no result lines: its calls are one cell.
		cells = append(cells, cur)
	}
	return cells, sc.Err()
}

// commitSplit is the mean bbolt commit of one cell.
type commitSplit struct {
	commits                            int
	dataWrites, dataPages              float64
	dataWrite, dataSync, metaWrite     time.Duration
	metaSync, firstWriteToMetaSyncDone time.Duration
}

func splitCommits(calls []traceCall) commitSplit {
	syncs := map[int]int{}
	for _, c := range calls {
		if c.name == "fdatasync" || c.name == "fsync" {
			syncs[c.fd]++
		}
	}
	fd, most := -1, 0
	for f, n := range syncs {
		if n > most {
			fd, most = f, n
		}
	}
	var s commitSplit
	var writes []traceCall
	var first float64
	nSync := 0
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	for _, c := range calls {
		if c.fd != fd {
			continue
		}
		switch c.name {
		case "pwrite64":
			if len(writes) == 0 {
				first = c.at
			}
			writes = append(writes, c)
		case "fdatasync", "fsync":
			nSync++
			if nSync == 1 {
				s.dataSync += sec(c.took)
				continue
			}
			// The second flush ends the commit; the last pwrite before it
			// was the meta page's.
			if len(writes) >= 2 {
				s.commits++
				data := writes[:len(writes)-1]
				s.dataWrites += float64(len(data))
				for _, w := range data {
					s.dataPages += float64(w.ret) / 4096
					s.dataWrite += sec(w.took)
				}
				s.metaWrite += sec(writes[len(writes)-1].took)
				s.metaSync += sec(c.took)
				s.firstWriteToMetaSyncDone += sec(c.at + c.took - first)
			}
			writes, nSync = nil, 0
		}
	}
	if n := s.commits; n > 0 {
		d := time.Duration(n)
		s.dataWrites /= float64(n)
		s.dataPages /= float64(n)
		s.dataWrite, s.dataSync, s.metaWrite, s.metaSync = s.dataWrite/d, s.dataSync/d, s.metaWrite/d, s.metaSync/d
		s.firstWriteToMetaSyncDone /= d
	}
	return s
}

func (s commitSplit) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
	return fmt.Sprintf("%d commits; per commit: %.1f data pwrites (%.1f pages) %v, fdatasync data %v, meta pwrite %v, fdatasync meta %v; first pwrite to end of meta sync %v",
		s.commits, s.dataWrites, s.dataPages, r(s.dataWrite), r(s.dataSync), r(s.metaWrite), r(s.metaSync), r(s.firstWriteToMetaSyncDone))
}

// commitSplitMain is `bench commitsplit TRACE`: every cell of the trace
// with bbolt commits, split.
func commitSplitMain(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: bench commitsplit TRACE (a file written by strace -f -tt -T -e trace=pwrite64,fdatasync,fsync,write)")
	}
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	cells, err := parseTrace(f)
	if err != nil {
		return err
	}
	for _, c := range cells {
		if s := splitCommits(c.calls); s.commits > 0 {
			name := strings.Join(c.names, "; ")
			if name == "" {
				name = "(the calls after the last result line)"
			}
			fmt.Printf("%s\n  %v\n", name, s)
		}
	}
	return nil
}
