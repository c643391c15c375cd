package oncekvtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Check fails t when applying a random S of s.Messages once each (the
// reference) and delivering the same S with duplicates, reordering and
// faults at the effect's boundary (see the package doc) leave different
// states. The failure shows the smallest counterexample found (rapid's
// shrinking, then oncekvtest's own: messages, copies, faults and moves
// taken away while the states still differ): S, the deliveries and what
// each did, the entries the states disagree on, and the likely cause. An
// invalid Spec fails t with ErrInvalidSpec. rapid's flags apply:
// -rapid.checks (100 cases), -rapid.seed, -rapid.shrinktime, and its fail
// files under testdata/rapid, which the next run tries first.
func Check[M any](t testing.TB, s Spec[M]) {
	t.Helper()
	c := newChecker(t, s)
	mix := someFaults
	if c.spec.NoFaults {
		mix = noFaults
	}
	c.check(mix, maxReduceRuns, c.inProcess)
}

// maxReduceRuns bounds the cases Check's reducer runs on the smallest
// case rapid found; maxCrashReduceRuns CheckCrash's, whose cases start
// processes.
const (
	maxReduceRuns      = 200
	maxCrashReduceRuns = 20
)

// tryFunc runs one case: a failure when the states differ, nil when they
// agree, an error when a run could not be made.
type tryFunc[M any] func(t *rapid.T, tc testCase[M]) (*failure[M], error)

// checker holds what every case of one Check or CheckCrash shares.
type checker[M any] struct {
	spec     Spec[M]
	tb       *logTB
	gate     gate
	crash    bool           // CheckCrash: kills instead of simulated faults
	refs     []reference[M] // the latest references, at most maxReferences
	failures []testCase[M]  // the latest failing cases, at most maxFailures
	root     string         // a temporary directory of the test's, for the runs' stores
	refBase  time.Time
	dupBase  time.Time
	tick     time.Duration
}

// newChecker validates s and sets its defaults, failing t on a bad Spec.
func newChecker[M any](t testing.TB, s Spec[M]) *checker[M] {
	t.Helper()
	s, err := s.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c := &checker[M]{spec: s, tb: &logTB{TB: t}, root: scratchDir(t),
		gate:    gate{maxShrink: s.MaxShrinkRuns},
		refBase: epoch, dupBase: epoch.Add(s.ClockSkew), tick: tick}
	if s.ClockSkew < 0 {
		c.dupBase, c.tick = epoch, 0
	}
	return c
}

// notShownSummary is the failure of every case rapid does not show: the
// same for all, so that rapid compares like with like while it shrinks.
const notShownSummary = "oncekvtest: the final states differ (the smallest counterexample and its likely cause follow)"

// check runs rapid's cases through try. The case rapid shows is reduced
// further, diagnosed and printed in full.
func (c *checker[M]) check(mix faultMix, reduceRuns int, try tryFunc[M]) {
	rapid.Check(c.tb, func(rt *rapid.T) {
		shown := c.shown(rt)
		tc := drawCase(rt, &c.spec, mix)
		var f *failure[M]
		known, ran := false, false
		if c.gate.open(shown) {
			ran = true
			var err error
			if f, err = try(rt, tc); err != nil {
				c.gate.failed = true
				rt.Fatalf("oncekvtest: a run failed: %v", err)
			}
		} else {
			// Past the budget rapid still runs each case it keeps twice:
			// a case that failed must fail again, or rapid calls it flaky.
			known = c.gate.failed && c.failedBefore(tc)
		}
		if f == nil && !known {
			if ran {
				c.gate.passed++
			}
			return
		}
		c.gate.failed = true
		if f != nil {
			c.remember(tc)
		}
		if !shown {
			rt.Fatalf("%s", notShownSummary)
		}
		f = c.reduce(rt, f, reduceRuns, try)
		f.causes = c.explain(rt, f)
		c.fail(rt, f)
	})
}

// maxFailures is how many failing cases a checker remembers.
const maxFailures = 32

// remember notes tc as a failing case.
func (c *checker[M]) remember(tc testCase[M]) {
	if len(c.failures) == maxFailures {
		c.failures = c.failures[1:]
	}
	c.failures = append(c.failures, tc.clone())
}

// failedBefore reports whether a case deeply equal to tc failed.
func (c *checker[M]) failedBefore(tc testCase[M]) bool {
	return slices.ContainsFunc(c.failures, func(f testCase[M]) bool { return reflect.DeepEqual(f, tc) })
}

// inProcess is Check's tryFunc.
func (c *checker[M]) inProcess(t *rapid.T, tc testCase[M]) (*failure[M], error) {
	msgs, sched := tc.messages(), tc.schedule()
	ref, err := c.reference(t.Context(), msgs)
	if err != nil {
		return nil, err
	}
	dup, err := c.play(t.Context(), msgs, sched, c.dupBase)
	if err != nil {
		return nil, err
	}
	return newFailure(tc, ref, dup, "duplicated"), nil
}

// reduce takes messages, copies, faults and moves away from f's case one
// at a time while the states still differ, within runs cases.
func (c *checker[M]) reduce(t *rapid.T, f *failure[M], runs int, try tryFunc[M]) *failure[M] {
	for progress := true; progress; {
		progress = false
		for _, tc := range f.tc.smaller() {
			if runs == 0 {
				return f
			}
			runs--
			if g, err := try(t, tc); err == nil && g != nil {
				f, progress = g, true
				break
			}
		}
	}
	return f
}

// explain finds f's likely causes.
func (c *checker[M]) explain(t *rapid.T, f *failure[M]) []cause {
	if c.crash {
		return c.diagnoseCrash(t, f)
	}
	return c.diagnose(t, f.msgs, f.sched, f.ref, f.got)
}

// gate decides which of rapid's calls of a property run: rapid's case
// count and shrinking time are flags of its own, and a Spec caps them.
type gate struct {
	maxPassing int // cases that may pass before the rest pass at once; 0: no cap
	maxShrink  int // cases that may run once one failed; 0: no cap
	passed     int
	failed     bool
	shrinking  int
}

// open reports whether the next case runs. The case rapid shows (the
// smallest failing one, replayed) always does.
func (g *gate) open(shown bool) bool {
	switch {
	case shown:
		return true
	case g.failed:
		g.shrinking++
		return g.maxShrink == 0 || g.shrinking <= g.maxShrink
	}
	return g.maxPassing == 0 || g.passed < g.maxPassing
}

// probe is what the property logs to learn whether rapid shows this
// case's log: it does for the smallest failing case only, replayed at the
// end, and there alone are the reduction and the diagnosis worth their
// runs.
const probe = "oncekvtest: is this case shown?"

// logTB is the testing.TB rapid.Check gets: the test's, with the probe
// caught on its way.
type logTB struct {
	testing.TB
	probed atomic.Bool
}

func (l *logTB) Logf(format string, args ...any) {
	if format == probe {
		l.probed.Store(true)
		return
	}
	l.TB.Helper()
	l.TB.Logf(format, args...)
}

// shown reports whether rapid shows t's log (see probe). With
// -rapid.log, which logs elsewhere, every case counts as shown.
func (c *checker[M]) shown(t *rapid.T) bool {
	c.tb.probed.Store(false)
	t.Logf(probe)
	if f := flag.Lookup("rapid.log"); f != nil && f.Value.String() == "true" {
		return true
	}
	return c.tb.probed.Load()
}

// maxReferences is how many references a checker keeps: while rapid
// shrinks a schedule, and while the reducer works, S often stays the same.
const maxReferences = 16

// reference is S and what applying it once each left.
type reference[M any] struct {
	msgs []M
	out  outcome
}

// reference returns the outcome of msgs once each, in order, on the
// reference clock: from the latest ones kept when one has an S deeply
// equal to msgs, else from a run.
func (c *checker[M]) reference(ctx context.Context, msgs []M) (outcome, error) {
	for _, r := range c.refs {
		if reflect.DeepEqual(r.msgs, msgs) {
			return r.out, nil
		}
	}
	out, err := c.play(ctx, msgs, once(len(msgs)), c.refBase)
	if err != nil {
		return outcome{}, err
	}
	if len(c.refs) == maxReferences {
		c.refs = c.refs[1:]
	}
	c.refs = append(c.refs, reference[M]{msgs: slices.Clone(msgs), out: out})
	return out, nil
}

// outcome is what one run left.
type outcome struct {
	state  State
	log    []string
	change *keyChange
	fired  []int // CheckCrash: the deliveries where a child was killed
}

// play delivers sched on a fresh store whose clock starts at start, in
// process, with the faults sched says.
func (c *checker[M]) play(ctx context.Context, msgs []M, sched schedule, start time.Time) (outcome, error) {
	dir, err := os.MkdirTemp(c.root, "run-")
	if err != nil {
		return outcome{}, fmt.Errorf("oncekvtest: %w", err)
	}
	defer os.RemoveAll(dir)
	r, err := openRun(&c.spec, msgs, dir, start, c.tick)
	if err != nil {
		return outcome{}, err
	}
	for n, d := range sched {
		if err := r.deliver(ctx, n, d, simulated(d.Fault)); err != nil {
			return outcome{}, fmt.Errorf("%w (closing: %v)", err, r.abandon())
		}
	}
	st, err := r.finish()
	return outcome{state: st, log: r.log, change: r.change}, err
}

// simulated returns the boundaries of a delivery's attempts for fault f,
// in process: only the first attempt has one.
func simulated(f fault) func(attempt int) boundary {
	return func(attempt int) boundary {
		switch {
		case attempt > 0:
		case f == faultRollback:
			return boundary{inEffect: func() error { return errRollback }}
		case f == faultAfterCommit:
			return boundary{afterCommit: func() { panic(crashSignal{}) }}
		}
		return boundary{}
	}
}

// failure is a counterexample, as printed.
type failure[M any] struct {
	tc      testCase[M]
	msgs    []M
	sched   schedule
	ref     outcome
	got     outcome
	gotName string
	diffs   []difference
	causes  []cause
}

// newFailure is the failure of tc when got differs from ref, else nil.
func newFailure[M any](tc testCase[M], ref, got outcome, gotName string) *failure[M] {
	ds := diff(ref.state, got.state)
	if len(ds) == 0 {
		return nil
	}
	return &failure[M]{tc: tc, msgs: tc.messages(), sched: tc.schedule(), ref: ref, got: got, gotName: gotName, diffs: ds}
}

// fail logs f in full and fails t with a summary of it.
func (c *checker[M]) fail(t *rapid.T, f *failure[M]) {
	t.Helper()
	t.Logf("%s", f.detail())
	var why []string
	for _, c := range f.causes {
		why = append(why, c.summary)
	}
	t.Fatalf("oncekvtest: the final states differ in %s (%s, %s); likely cause: %s",
		count(len(f.diffs), "entry", "entries"), count(len(f.msgs), "message", "messages"),
		count(len(f.sched), "delivery", "deliveries"), strings.Join(why, "; "))
}

// detail is the counterexample in full.
func (f *failure[M]) detail() string {
	var b strings.Builder
	fmt.Fprintf(&b, "oncekvtest: counterexample: %s, %s\n",
		count(len(f.msgs), "message", "messages"), count(len(f.sched), "delivery", "deliveries"))
	b.WriteString("  S, applied once each, in order, to the reference store:\n")
	for i, m := range f.msgs {
		fmt.Fprintf(&b, "    m%d = %s\n", i, clip(fmt.Sprintf("%+v", m)))
	}
	fmt.Fprintf(&b, "  deliveries of the %s run: %s\n", f.gotName, f.sched)
	for _, line := range f.got.log {
		fmt.Fprintf(&b, "    %s\n", line)
	}
	fmt.Fprintf(&b, "  final states, reference (%s) and %s (%s), differ in %s:\n",
		count(len(f.ref.state), "entry", "entries"), f.gotName, count(len(f.got.state), "entry", "entries"),
		count(len(f.diffs), "entry", "entries"))
	b.WriteString(formatDiff(f.diffs, "reference", f.gotName))
	for _, c := range f.causes {
		fmt.Fprintf(&b, "  likely cause: %s\n", c.summary)
		if c.detail != "" {
			fmt.Fprintf(&b, "    %s\n", strings.ReplaceAll(strings.TrimRight(c.detail, "\n"), "\n", "\n    "))
		}
	}
	return b.String()
}

// count is "1 message" or "3 messages".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
