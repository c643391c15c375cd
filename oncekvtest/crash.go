package oncekvtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
)

// CrashPlanEnv is the environment variable that makes CheckCrash, in the
// child process it starts, play its part: it names the plan file.
const CrashPlanEnv = "ONCEKVTEST_CRASH_PLAN"

// childTimeout bounds one child process: a child that hangs (a handler
// waiting forever) fails the case instead of the whole test binary.
const childTimeout = 2 * time.Minute

// maxChildOutput is how much of a failed child's output a failure shows.
const maxChildOutput = 8 << 10

// crashPlan is what the parent tells the child, in the plan file; the
// child's files (store.db, files/, acks, kills, done) sit beside it.
type crashPlan struct {
	Test     string            `json:"test"`
	Messages []json.RawMessage `json:"messages"`
	Schedule schedule          `json:"schedule"` // a fault is a kill there
	Start    time.Time         `json:"start"`
	Tick     time.Duration     `json:"tick"`
}

// CheckCrash is Check with real crashes, for the test that calls it (one
// CheckCrash per test or subtest): for each case it re-runs that test in
// a child process (os.Args[0] -test.run=^Name$, with CrashPlanEnv set),
// which delivers the duplicated schedule and SIGKILLs itself where Check
// would inject a fault: inside an effect (after it ran, before the commit)
// or right after a commit (before the effect's OnCommit hooks and the
// ack). The child is started again, with a fresh handler from Spec.Open
// on the same store and Env.Dir, until every delivery is acked; the state
// it leaves must equal the reference's, applied in process. Messages
// travel to the child as JSON: M must survive encoding/json. In the
// child, CheckCrash plays its part and returns. Since each case starts
// processes, Spec.CrashChecks (or CrashChecksEnv) caps the cases (10)
// and Spec.MaxShrinkRuns the shrinking (DefaultCrashShrinkRuns). Only on
// Unix; elsewhere it skips.
func CheckCrash[M any](t testing.TB, s Spec[M]) {
	t.Helper()
	if path := os.Getenv(CrashPlanEnv); path != "" {
		crashChild(t, s, path)
		return
	}
	if !canKill {
		t.Skip("oncekvtest: CheckCrash needs SIGKILL (Unix)")
	}
	if s.MaxShrinkRuns == 0 {
		s.MaxShrinkRuns = DefaultCrashShrinkRuns
	}
	explicit := s.CrashChecks != 0
	c := newChecker(t, s)
	c.crash = true
	c.gate.maxPassing = c.spec.CrashChecks
	if v := os.Getenv(CrashChecksEnv); v != "" && !explicit {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("oncekvtest: %s=%q: want a positive number of cases", CrashChecksEnv, v)
		}
		c.gate.maxPassing = n
	}
	test := t.Name()
	c.check(manyFaults, maxCrashReduceRuns, func(rt *rapid.T, tc testCase[M]) (*failure[M], error) {
		return c.crashTry(rt, test, tc)
	})
	// rapid counted the cases past the cap as passed too.
	t.Logf("oncekvtest: %d of them ran in child processes with SIGKILLs", c.gate.passed)
}

// crashTry is CheckCrash's tryFunc: tc in child processes, against the
// reference in process.
func (c *checker[M]) crashTry(t *rapid.T, test string, tc testCase[M]) (*failure[M], error) {
	msgs := tc.messages()
	plan := crashPlan{Test: test, Schedule: tc.schedule(), Start: c.dupBase, Tick: c.tick}
	for i, m := range msgs {
		raw, err := roundTrip(m)
		if err != nil {
			return nil, fmt.Errorf("oncekvtest: CheckCrash sends the messages to its child as JSON, "+
				"and m%d does not survive it: %w", i, err)
		}
		plan.Messages = append(plan.Messages, raw)
	}
	ref, err := c.reference(t.Context(), msgs)
	if err != nil {
		return nil, err
	}
	got, err := c.crashRun(t.Context(), &plan)
	if err != nil {
		return nil, err
	}
	return newFailure(tc, ref, got, "crashed"), nil
}

// roundTrip encodes m as JSON and checks that decoding gives it back,
// deeply equal.
func roundTrip[M any](m M) (json.RawMessage, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var back M
	if err := json.Unmarshal(raw, &back); err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(m, back) {
		return nil, fmt.Errorf("%s decodes as %+v, not %+v", raw, back, m)
	}
	return raw, nil
}

// crashRun runs plan in child processes until one acks the last
// delivery, then reads the state they left. Its outcome's fired lists the
// deliveries where a kill happened.
func (c *checker[M]) crashRun(ctx context.Context, plan *crashPlan) (outcome, error) {
	dir, err := os.MkdirTemp(c.root, "crash-")
	if err != nil {
		return outcome{}, fmt.Errorf("oncekvtest: %w", err)
	}
	defer os.RemoveAll(dir)
	b, err := json.Marshal(plan)
	if err != nil {
		return outcome{}, fmt.Errorf("oncekvtest: %w", err)
	}
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, b, 0o600); err != nil {
		return outcome{}, fmt.Errorf("oncekvtest: %w", err)
	}
	kills := 0
	for _, d := range plan.Schedule {
		if d.Fault != faultNone {
			kills++
		}
	}
	// Each kill ends one child at most, and the last child finishes.
	for runs := 0; ; runs++ {
		if runs > kills {
			return outcome{}, fmt.Errorf("oncekvtest: %d child processes did not finish the deliveries", runs)
		}
		killed, out, err := runChild(ctx, plan.Test, planPath)
		if _, serr := os.Stat(filepath.Join(dir, "done")); serr == nil {
			break // the test may have failed after CheckCrash returned: not ours
		}
		if err != nil && !killed {
			return outcome{}, fmt.Errorf("oncekvtest: child process: %w; its output ends with:\n%s", err, out)
		}
	}
	fired, err := readLines(filepath.Join(dir, "kills"))
	if err != nil {
		return outcome{}, err
	}
	// The state, read with no handler: the last child ran the OnClose
	// functions before it wrote done.
	r := &run[M]{spec: &c.spec, clock: newClock(plan.Start.Add(time.Duration(len(plan.Schedule)+1) * plan.Tick))}
	db, err := oncekv.Open(filepath.Join(dir, "store.db"), r.storeOptions())
	if err != nil {
		return outcome{}, fmt.Errorf("oncekvtest: open the crashed store: %w", err)
	}
	r.db, r.env = db, &Env{DB: db, Dir: filepath.Join(dir, "files")}
	st, err := r.finish()
	got := outcome{state: st, fired: fired}
	for _, n := range fired {
		got.log = append(got.log, killed(n, plan.Schedule[n].Fault))
	}
	return got, err
}

// killed describes the kill at delivery n.
func killed(n int, f fault) string {
	if f == faultRollback {
		return fmt.Sprintf("SIGKILL inside the effect of delivery #%d, before its commit", n)
	}
	return fmt.Sprintf("SIGKILL right after the commit of delivery #%d, before its ack", n)
}

// runChild runs the test binary as the child of plan and waits for it.
// killed reports an end by SIGKILL; out is the end of its output.
func runChild(ctx context.Context, test, planPath string) (killed bool, out string, err error) {
	ctx, cancel := context.WithTimeout(ctx, childTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+runPattern(test), "-test.count=1")
	// A race-detector binary sleeps 1s at exit unless told not to.
	race := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), CrashPlanEnv+"="+planPath, "GORACE="+race)
	var buf tail
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	if ctx.Err() != nil { // CommandContext kills with SIGKILL too
		return false, buf.String(), fmt.Errorf("no end within %v: %w", childTimeout, ctx.Err())
	}
	return killedBySIGKILL(cmd.ProcessState), buf.String(), err
}

// runPattern is the -test.run pattern of exactly the test named name
// (t.Name(): subtests are slash-separated).
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// tail keeps the last maxChildOutput bytes written to it.
type tail struct{ b []byte }

func (w *tail) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	if over := len(w.b) - maxChildOutput; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
	}
	return len(p), nil
}

func (w *tail) String() string { return string(w.b) }

// crashChild is CheckCrash in the child: it delivers the plan's schedule
// from the first delivery not acked yet, kills itself at the plan's kills
// not fired yet, and writes done once every delivery is acked.
func crashChild[M any](t testing.TB, s Spec[M], planPath string) {
	t.Helper()
	s, err := s.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if err := childDeliver(t.Context(), t.Name(), &s, planPath); err != nil {
		t.Fatal(err)
	}
}

func childDeliver[M any](ctx context.Context, test string, s *Spec[M], planPath string) error {
	b, err := os.ReadFile(planPath)
	if err != nil {
		return fmt.Errorf("oncekvtest: child: %w", err)
	}
	var plan crashPlan
	if err := json.Unmarshal(b, &plan); err != nil {
		return fmt.Errorf("oncekvtest: child: plan %s: %w", planPath, err)
	}
	if plan.Test != test {
		return fmt.Errorf("oncekvtest: child: the plan is for %s, and %s runs it", plan.Test, test)
	}
	msgs := make([]M, len(plan.Messages))
	for i, raw := range plan.Messages {
		if err := json.Unmarshal(raw, &msgs[i]); err != nil {
			return fmt.Errorf("oncekvtest: child: m%d: %w", i, err)
		}
	}
	dir := filepath.Dir(planPath)
	acks, err := readLines(filepath.Join(dir, "acks"))
	if err != nil {
		return err
	}
	firedAt, err := readLines(filepath.Join(dir, "kills"))
	if err != nil {
		return err
	}
	next := len(acks)
	r, err := openRun(s, msgs, dir, plan.Start.Add(time.Duration(next)*plan.Tick), plan.Tick)
	if err != nil {
		return err
	}
	for n := next; n < len(plan.Schedule); n++ {
		r.clock.set(plan.Start.Add(time.Duration(n) * plan.Tick))
		d := plan.Schedule[n]
		b := boundary{}
		if !slices.Contains(firedAt, n) {
			b = killAt(d.Fault, filepath.Join(dir, "kills"), n)
		}
		if err := r.deliver(ctx, n, d, func(int) boundary { return b }); err != nil {
			return errors.Join(err, r.abandon())
		}
		if err := appendLine(filepath.Join(dir, "acks"), n); err != nil { // the ack
			return errors.Join(err, r.abandon())
		}
	}
	if _, err := r.finish(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "done"), nil, 0o600)
}

// killAt returns the boundary that kills this process where fault f
// says, once delivery n is written down in the kills file, so that the
// next child does not kill there again. Every attempt gets it until it
// fires: an attempt that fails before the point reaches it no more than a
// duplicate does.
func killAt(f fault, kills string, n int) boundary {
	fire := func() {
		if err := appendLine(kills, n); err != nil {
			panic(err) // the child fails; the parent shows why
		}
		killSelf()
	}
	switch f {
	case faultRollback:
		return boundary{inEffect: func() error { fire(); return nil }}
	case faultAfterCommit:
		return boundary{afterCommit: fire}
	}
	return boundary{}
}

// appendLine appends n and a newline to the file at path in one write, so
// a kill never leaves half a line.
func appendLine(path string, n int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("oncekvtest: child: %w", err)
	}
	_, err = f.WriteString(strconv.Itoa(n) + "\n")
	return errors.Join(err, f.Close())
}

// readLines reads the numbers appendLine wrote; a missing file has none.
func readLines(path string) ([]int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("oncekvtest: %w", err)
	}
	defer f.Close()
	var ns []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n, err := strconv.Atoi(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("oncekvtest: %s: %w", path, err)
		}
		ns = append(ns, n)
	}
	return ns, sc.Err()
}
