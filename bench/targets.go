package main

import "fmt"

// target is one of issue 5's targets: a ratio of two figures of the same
// run, and the least it must be.
type target struct {
	name      string
	got, want float64
	missing   string // why it could not be computed
	atMost    bool   // got must be <= want instead of >=
}

func (t target) String() string {
	switch {
	case t.missing != "":
		return fmt.Sprintf("- not measured: %s (%s)", t.name, t.missing)
	case t.met():
		return fmt.Sprintf("- met: %s: %.2f (target %s%.2f)", t.name, t.got, t.cmp(), t.want)
	case t.atMost:
		return fmt.Sprintf("- MISSED: %s: %.2f (target <= %.2f, over by %.0f%%)", t.name, t.got, t.want, 100*(t.got/t.want-1))
	}
	return fmt.Sprintf("- MISSED: %s: %.2f (target >= %.2f, short by %.0f%%)", t.name, t.got, t.want, 100*(1-t.got/t.want))
}

func (t target) cmp() string {
	if t.atMost {
		return "<= "
	}
	return ">= "
}

func (t target) met() bool {
	if t.atMost {
		return t.got <= t.want
	}
	return t.got >= t.want
}

// ratio is a target on a/b; a figure that was not measured leaves it
// "not measured" rather than failed.
func ratio(name string, a, b, want float64) target {
	t := target{name: name, want: want}
	switch {
	case a == 0 || b == 0:
		t.missing = "a figure is missing: check -peers, -sync and the PostgreSQL DSN"
	default:
		t.got = a / b
	}
	return t
}

func (st *suite) targets() []target {
	n := st.cfg.clients
	ok1 := st.rate("oncekv", kindUnique, true, 1)
	okN := st.rate("oncekv", kindUnique, true, n)
	okDup := st.rate("oncekv", kindDup, true, 1)
	ts := []target{
		ratio("durable unique Apply / raw bbolt, 1 client", ok1, st.rate("bbolt", kindUnique, true, 1), 0.9),
		ratio("sync-off unique Apply / raw bbolt, 1 client", st.rate("oncekv", kindUnique, false, 1), st.rate("bbolt", kindUnique, false, 1), 0.75),
	}
	if d := st.get("oncekv", kindDup, true, 1); d != nil {
		// The device's flush count takes in every process on the machine,
		// so a duplicate that wrote nothing itself (no commit, hence no
		// fsync) is held to "below 0.01" there.
		t := target{name: fmt.Sprintf("flushes per duplicate (device count; this process wrote %.0f bytes per duplicate)", d.appBytes),
			got: d.flushesPerOp, want: 0.01, atMost: true}
		if d.appBytes > 0 {
			t.want = 0
		}
		ts = append(ts, t)
	} else {
		ts = append(ts, target{name: "flushes per duplicate", missing: "no oncekv dup cell"})
	}
	ts = append(ts,
		ratio("duplicates/s / Badger's, 1 client", okDup, st.rate("badger", kindDup, true, 1), 2.5),
		ratio("duplicates/s / SQLite's (FULL), 1 client", okDup, st.rate("sqlite-full", kindDup, true, 1), 10),
		ratio(fmt.Sprintf("durable unique, %d clients / 1 client", n), okN, ok1, 4),
	)
	for _, p := range []string{"sqlite-full", "badger", "postgres"} {
		ts = append(ts, ratio(fmt.Sprintf("durable unique, %d clients / %s's", n, p), okN, st.rate(p, kindUnique, true, n), 2.5))
	}
	ts = append(ts, ratio(fmt.Sprintf("ApplyBatch of %d durable / SQLite (FULL) durable 1 client", st.cfg.batch),
		st.rate("oncekv", kindBatch, true, 1), st.rate("sqlite-full", kindUnique, true, 1), 10))
	size := ratio("bytes on disk per mark / SQLite's", st.sizes["oncekv"], st.sizes["sqlite-full"], 1)
	size.atMost = true
	ts = append(ts, size)
	if g := st.growth; len(g) >= 2 {
		first, last := g[0], g[len(g)-1]
		ts = append(ts, ratio(fmt.Sprintf("unique sync-off at %d live marks / at %d", last.marks, first.marks),
			last.opsPerSec, first.opsPerSec, 0.7))
	} else {
		ts = append(ts, target{name: "growth", missing: "needs two -growth sizes"})
	}
	return ts
}
