package main

import (
	"strings"
	"testing"
	"time"
)

// TestCommitSplit: two bbolt commits of a cell (two data pages then the
// meta page, each followed by an fdatasync) come out as their means, the
// calls on other fds and before the cell are left out, and the cell takes
// the name of its result line.
func TestCommitSplit(t *testing.T) {
	trace := `100 10:00:00.000000 pwrite64(5, "x"..., 4096, 0) = 4096 <0.000100>
100 10:00:00.000200 fdatasync(5)      = 0 <0.000300>
100 10:00:00.001000 write(2, "bench: warm-up cell 1 ops/s"..., 30) = 30 <0.000010>
100 10:00:00.001100 write(2, "bench: (1.0s)\n", 14) = 14 <0.000010>
101 10:00:01.000000 pwrite64(5, "x"..., 8192, 4096) = 8192 <0.000100>
101 10:00:01.000100 pwrite64(5, "x"..., 4096, 16384) = 4096 <0.000100>
101 10:00:01.000200 pwrite64(7, "y"..., 4096, 0) = 4096 <0.000100>
101 10:00:01.000300 fdatasync(5)      = 0 <0.000400>
101 10:00:01.000800 pwrite64(5, "m"..., 4096, 0) = 4096 <0.000050>
101 10:00:01.000900 fdatasync(5)      = 0 <0.000100>
102 10:00:02.000000 pwrite64(5, "x"..., 4096, 4096) = 4096 <0.000300>
102 10:00:02.000400 fdatasync(5)      = 0 <0.000600>
102 10:00:02.001100 pwrite64(5, "m"..., 4096, 4096) = 4096 <0.000050>
102 10:00:02.001200 fdatasync(5)      = 0 <0.000300>
100 10:00:03.000000 write(2, "bench: oncekv unique durable c8 "..., 30) = 30 <0.000010>
100 10:00:03.000100 write(2, "bench: (2.0s)\n", 14) = 14 <0.000010>
`
	cells, err := parseTrace(strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 2 || strings.Join(cells[1].names, ";") != "oncekv unique durable c8" {
		t.Fatalf("cells: %+v", cells)
	}
	s := splitCommits(cells[1].calls)
	if s.commits != 2 || s.dataWrites != 1.5 || s.dataPages != 2 {
		t.Fatalf("split: %v", s)
	}
	us := time.Microsecond
	if s.dataWrite != 250*us || s.dataSync != 500*us || s.metaWrite != 50*us || s.metaSync != 200*us {
		t.Fatalf("split times: %v", s)
	}
	if want := 1250 * us; s.firstWriteToMetaSyncDone.Round(us) != want {
		t.Fatalf("first pwrite to end of meta sync %v, want %v", s.firstWriteToMetaSyncDone, want)
	}
}

// TestCommitSplitNoResultLines: a trace without the bench's result lines
// (a go test binary's) is one cell, without a name.
func TestCommitSplitNoResultLines(t *testing.T) {
	trace := `101 10:00:01.000000 pwrite64(5, "x"..., 4096, 4096) = 4096 <0.000100>
101 10:00:01.000300 fdatasync(5)      = 0 <0.000400>
101 10:00:01.000800 pwrite64(5, "m"..., 4096, 0) = 4096 <0.000050>
101 10:00:01.000900 fdatasync(5)      = 0 <0.000100>
`
	cells, err := parseTrace(strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 1 || len(cells[0].names) != 0 {
		t.Fatalf("cells: %+v", cells)
	}
	if s := splitCommits(cells[0].calls); s.commits != 1 || s.dataPages != 1 {
		t.Fatalf("split: %v", s)
	}
}
