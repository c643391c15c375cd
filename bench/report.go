package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// get returns the result of a cell, or nil when it was not measured.
func (st *suite) get(peer, kind string, sync bool, clients int) *result {
	for i := range st.results {
		r := &st.results[i]
		if r.peer == peer && r.kind == kind && r.sync == sync && r.clients == clients {
			return r
		}
	}
	return nil
}

func (st *suite) rate(peer, kind string, sync bool, clients int) float64 {
	if r := st.get(peer, kind, sync, clients); r != nil {
		return r.opsPerSec
	}
	return 0
}

func num(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func (st *suite) markdown() string {
	var b strings.Builder
	c := st.cfg
	fmt.Fprintf(&b, "## Results\n\nOperations per second, each the median of %d runs after a warm-up. "+
		"Durable: %d keys per run; sync-off and duplicates: %d. Payload %d B, response %d B, batch %d, %d clients.\n\n",
		c.runs, c.keys, c.fastKeys, c.payload, c.response, c.batch, c.clients)
	n := c.clients
	fmt.Fprintf(&b, "| peer | unique durable c1 | unique durable c%d | unique sync-off c1 | unique sync-off c%d | batch %d durable | dup c1 | dup c%d | flushes/op | bytes written/op: device / this process | flushes/dup | p50 / p99 durable c1 | bytes/mark |\n", n, n, c.batch, n)
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range allPeers {
		u := st.get(p.name, kindUnique, true, 1)
		if u == nil && st.get(p.name, kindUnique, false, 1) == nil {
			continue
		}
		flushes, written, lat := "–", "–", "–"
		if u != nil {
			flushes, written = num(u.flushesPerOp), num(u.bytesPerOp)+" / "+num(u.appBytes)
			lat = fmt.Sprintf("%v / %v", u.p50.Round(time.Microsecond), u.p99.Round(time.Microsecond))
		}
		dupFlush := "–"
		if d := st.get(p.name, kindDup, true, 1); d != nil {
			dupFlush = num(d.flushesPerOp)
			if d.flushesPerOp == 0 {
				dupFlush = "0"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.name,
			num(st.rate(p.name, kindUnique, true, 1)), num(st.rate(p.name, kindUnique, true, n)),
			num(st.rate(p.name, kindUnique, false, 1)), num(st.rate(p.name, kindUnique, false, n)),
			num(st.rate(p.name, kindBatch, true, 1)),
			num(st.rate(p.name, kindDup, true, 1)), num(st.rate(p.name, kindDup, true, n)),
			flushes, written, dupFlush, lat, num(st.sizes[p.name]))
	}
	if c.dupRatio > 0 {
		fmt.Fprintf(&b, "\nMixed, %.0f%% duplicates, durable, 1 client:", 100*c.dupRatio)
		for _, r := range st.results {
			if r.kind == kindMixed {
				fmt.Fprintf(&b, " %s %s;", r.peer, num(r.opsPerSec))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\nPeers:\n\n")
	for _, p := range allPeers {
		fmt.Fprintf(&b, "- `%s`: %s\n", p.name, p.note)
	}
	for _, s := range st.skipped {
		fmt.Fprintf(&b, "- skipped: %s\n", s)
	}
	b.WriteString("\nflushes/op and bytes written/op are from /proc/diskstats for the whole device, " +
		"in the durable single-client unique cell; bytes/mark is the space the store takes after " +
		strconv.Itoa(c.sizeKeys) + " keys (mark and effect row), over the key count.\n")
	st.commitTable(&b)
	if len(st.growth) > 0 {
		fmt.Fprintf(&b, "\n### oncekv against live marks\n\nOne store per size, loaded with ApplyBatch (sync off), %s; the runs taken in turns across the sizes. "+
			"Per durable commit: pages this process wrote (bytes / page size: B-tree pages, freelist, meta) and the mean commit time; "+
			"the freelist's bytes (bbolt writes it with every commit); the newest window (where every new mark lands) as raw bbolt reads it after the load.\n\n", st.growthWindows())
		b.WriteString("| live marks | unique sync-off c1 | unique durable c1 | open time | pages / durable commit | ms / durable commit | freelist bytes | free pages | windows | root bucket pages | newest window: marks | depth | pages | effects depth |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, g := range st.growth {
			d, t := g.durableCell, g.tree
			fmt.Fprintf(&b, "| %d | %s | %s | %v | %s | %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", g.marks, num(g.opsPerSec), num(g.durable),
				g.open.Round(time.Microsecond), num(d.pagesPerCommit), num(d.commitMillis), d.freelist, t.freePages,
				t.windows, t.rootPages, t.newestKeys, t.newestDepth, t.newestPages, t.effectsDepth)
		}
	}
	if o := st.open; o != nil {
		fmt.Fprintf(&b, "\n### Open after a clean Close\n\n%d live marks in %d window(s), loaded with DB.LoadMarks (sync off) in %v; "+
			"Close took %v; file %d MiB. Open, each after a clean Close: %v (median %v).\n",
			o.marks, o.windows, o.load.Round(time.Millisecond), o.close.Round(time.Microsecond), o.fileBytes>>20,
			roundAll(o.opens), o.median().Round(time.Microsecond))
	}
	if f := st.fence; f != nil {
		fmt.Fprintf(&b, "\n### PutFenced\n\nOne transaction of %d new keys, sync off, commit included (median of %d each, taken alternately): "+
			"Put %v, PutFenced %v: %.2fx.\n", f.keys, st.cfg.runs*fenceRunsPer, f.plain.Round(time.Microsecond), f.fenced.Round(time.Microsecond),
			f.fenced.Seconds()/f.plain.Seconds())
	}
	st.expiryTable(&b)
	b.WriteString("\n### Targets\n\n")
	for _, t := range st.targets() {
		b.WriteString(t.String() + "\n")
	}
	b.WriteString("\n### Machine\n\n")
	for _, m := range st.machine {
		fmt.Fprintf(&b, "- %s\n", m)
	}
	return b.String()
}

// commitTable is what oncekv's commits did in each of its cells: group
// size, time and pages written, from its Stats and /proc/self/io.
func (st *suite) commitTable(b *strings.Builder) {
	var rows []string
	for _, r := range st.results {
		if r.peer != "oncekv" || r.requestsPerCommit == 0 {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %d |", r.cell, num(r.requestsPerCommit), num(r.commitMillis),
			num(r.pagesPerCommit), r.freelist))
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n### oncekv's commits\n\nFrom Stats.CommitHistograms over each run (median of the runs): marks per commit (the group size), " +
		"mean commit time (write transaction start to fsync end), and pages this process wrote per commit (its bytes written / page size).\n\n" +
		"| cell | requests / commit | ms / commit | pages / commit | freelist bytes |\n|---|---:|---:|---:|---:|\n")
	b.WriteString(strings.Join(rows, "\n") + "\n")
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Microsecond)
	}
	return out
}

// writeCSV writes every measured run.
func (st *suite) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"peer", "kind", "sync", "clients", "batch", "run", "ops", "seconds", "ops_per_sec", "flushes", "bytes_written_device", "bytes_written_process", "p50_us", "p99_us"})
	for _, r := range st.results {
		for _, x := range r.runs {
			_ = w.Write([]string{x.peer, x.kind, syncName(x.sync), strconv.Itoa(x.clients), strconv.Itoa(x.batch),
				strconv.Itoa(x.i), strconv.Itoa(x.ops), strconv.FormatFloat(x.elapsed.Seconds(), 'f', 6, 64),
				strconv.FormatFloat(x.opsPerSec(), 'f', 1, 64),
				strconv.FormatUint(x.disk.flushes, 10), strconv.FormatUint(x.disk.sectorsWrite*512, 10), strconv.FormatUint(x.proc.wchar, 10),
				strconv.FormatInt(x.p50.Microseconds(), 10), strconv.FormatInt(x.p99.Microseconds(), 10)})
		}
	}
	for _, g := range st.growth {
		_ = w.Write([]string{"oncekv-growth-" + strconv.Itoa(g.marks), kindUnique, "sync-off", "1", "1", "median", "", "",
			strconv.FormatFloat(g.opsPerSec, 'f', 1, 64), "", "", "", "", ""})
		_ = w.Write([]string{"oncekv-growth-" + strconv.Itoa(g.marks), kindUnique, "durable", "1", "1", "median", "", "",
			strconv.FormatFloat(g.durable, 'f', 1, 64), "", "", "", "", ""})
	}
	if o := st.open; o != nil {
		for i, d := range o.opens {
			_ = w.Write([]string{"oncekv-open-" + strconv.Itoa(o.marks), "open", "", "", "", strconv.Itoa(i + 1), strconv.Itoa(o.marks),
				strconv.FormatFloat(d.Seconds(), 'f', 6, 64), "", "", "", "", "", ""})
		}
	}
	if f := st.fence; f != nil {
		for _, x := range []struct {
			kind string
			d    time.Duration
		}{{"put", f.plain}, {"putfenced", f.fenced}} {
			_ = w.Write([]string{"oncekv", x.kind, "sync-off", "1", strconv.Itoa(f.keys), "median", strconv.Itoa(f.keys),
				strconv.FormatFloat(x.d.Seconds(), 'f', 6, 64), strconv.FormatFloat(float64(f.keys)/x.d.Seconds(), 'f', 1, 64), "", "", "", "", ""})
		}
	}
	for p, s := range st.sizes {
		_ = w.Write([]string{p, "size", "", "", "", "", strconv.Itoa(st.cfg.sizeKeys), "", "", "", "", "", "", "bytes_per_mark=" + strconv.FormatFloat(s, 'f', 1, 64)})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// describeMachine is what the results were measured on.
func describeMachine(cfg *config, dev string) []string {
	m := []string{
		"nproc: " + strconv.Itoa(runtime.NumCPU()),
		"cpu: " + cpuModel(),
		"kernel: " + kernelRelease(),
		"temp dir: " + cfg.tmp + " on " + filesystem(cfg.tmp) + ", device " + orNone(dev),
		"go: " + runtime.Version(),
		"sqlite library: " + sqliteVersion(),
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "go.etcd.io/bbolt", "github.com/dgraph-io/badger/v4", "github.com/mattn/go-sqlite3",
				"github.com/jackc/pgx/v5", "gonum.org/v1/plot":
				m = append(m, d.Path+": "+d.Version)
			case "github.com/oncekv/oncekv":
				m = append(m, d.Path+": this checkout ("+gitRev()+")")
			}
		}
	}
	if cfg.pgDSN != "" {
		if s, err := openPostgres(storeConfig{pgDSN: cfg.pgDSN, sync: true}); err == nil {
			v, _ := s.(pgStore).version()
			m = append(m, "postgresql server: "+v)
			_ = s.close()
		}
	}
	m = append(m, "command: go run . "+strings.Join(os.Args[1:], " "))
	return m
}

func orNone(s string) string {
	if s == "" {
		return "none found"
	}
	return s
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// filesystem names the type of the mount that holds dir, from /proc/mounts.
func filesystem(dir string) string {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return "unknown"
	}
	best, typ := "", "unknown"
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best, typ = mp, f[2]+" ("+f[0]+" on "+mp+")"
		}
	}
	return typ
}

// gitRev names the core the results were measured on: its commit, and
// "-dirty" when the working tree had uncommitted changes.
func gitRev() string {
	out, err := exec.Command("git", "-C", "..", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
