package oncekv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// The workload child: the test binary re-executed (see TestMain) with
// crashChildEnv naming the file and workloadChildEnv describing the
// workload as "seed:pool:n:workers:more": n ops of oncetest.Workload over
// keys k0..k<pool-1>, then more over k<pool>..k<pool+more-1>, run by workers
// goroutines. It prints an oncetest.IssueLine before each op, then an
// oncetest.AckLine once the op is acknowledged or "ERR <id> <class> <msg>",
// then "READ ok" once a read after all the writes worked, then "END". With
// crashAtEnv set to "<point>:<k>" it SIGKILLs itself the k-th time the
// write path reaches that crash point.
const (
	workloadChildEnv = "ONCEKV_WORKLOAD"
	crashAtEnv       = "ONCEKV_CRASH_AT"
)

// soak reports whether the long runs were asked for (ONCEKV_SOAK=1).
func soak() bool { return os.Getenv("ONCEKV_SOAK") == "1" }

func workloadChild(path string) {
	// One goroutine on one thread makes every write system call from the
	// same thread, so strace's per-thread call counts are the workload's.
	runtime.LockOSThread()
	var seed uint64
	var pool, n, workers, more int
	if _, err := fmt.Sscanf(os.Getenv(workloadChildEnv), "%d:%d:%d:%d:%d", &seed, &pool, &n, &workers, &more); err != nil {
		fmt.Println("BAD-SPEC", err)
		os.Exit(2)
	}
	db, err := oncekv.Open(path, &oncekv.Options{ExpireInterval: -1, OpenTimeout: 10 * time.Second})
	if err != nil {
		fmt.Println("OPEN-ERR", errClass(err), oneLine(err))
		return
	}
	if at := os.Getenv(crashAtEnv); at != "" {
		name, k, _ := strings.Cut(at, ":")
		point, ok := oncekv.CrashPoints[name]
		var want int64
		if _, err := fmt.Sscan(k, &want); err != nil || !ok {
			fmt.Println("BAD-CRASH-AT", at)
			os.Exit(2)
		}
		var hits atomic.Int64
		oncekv.SetCrashHook(db, func(p oncekv.CrashPoint) {
			if p == point && hits.Add(1) == want {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // never returns: the signal is on its way
			}
		})
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	// The extra ops are over keys of their own, fresh unless an earlier run
	// of the same pool used them, so every crash point comes.
	ops := append(oncetest.Workload(rng, 0, pool, n), oncetest.Workload(rng, pool, pool+more, more)...)

	var mu sync.Mutex // one line at a time; each is one write(2), so a kill never splits one
	say := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Println(s)
	}
	var next atomic.Int64
	work := func() {
		for {
			i := next.Add(1) - 1
			if i >= int64(len(ops)) {
				return
			}
			op := ops[i]
			say(oncetest.IssueLine(op))
			resp, err := op.Run(context.Background(), db)
			if err != nil {
				say(fmt.Sprintf("ERR %s %s %s", op.ID(), errClass(err), oneLine(err)))
				continue
			}
			say(oncetest.AckLine(op.ID(), resp))
		}
	}
	if workers <= 1 {
		work() // on this locked thread
	} else {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(work)
		}
		wg.Wait()
	}
	if err := db.View(func(tx *oncekv.Tx) error {
		if b := tx.Bucket(oncetest.EffectBucket); b != nil {
			_ = b.Get(oncetest.TotalKey)
		}
		return nil
	}); err != nil {
		say("READ-ERR " + oneLine(err))
	} else {
		say("READ ok")
	}
	if err := db.Close(); err != nil {
		say("CLOSE-ERR " + oneLine(err))
	}
	say("END")
}

// errClass sorts a child's error for the parent.
func errClass(err error) string {
	switch {
	case errors.Is(err, oncekv.ErrPoisoned):
		return "poisoned"
	case errors.Is(err, oncekv.ErrNoSpace):
		return "nospace"
	case errors.Is(err, oncekv.ErrInProgress):
		return "inprogress"
	}
	return "other"
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " | ") }

// childRun is what a workload child did.
type childRun struct {
	lines  []string
	stderr string
	killed bool // died of SIGKILL
	err    error
}

// runWorkloadChild runs the workload child on path, under the command
// prefix wrap (strace, say) if any, and waits for it to end.
func runWorkloadChild(t *testing.T, path, spec, crashAt string, wrap ...string) childRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(wrap, os.Args[0], "-test.run=^$")
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, workloadChildEnv+"="+spec, crashAtEnv+"="+crashAt,
		// Under -race a process sleeps 1 s at exit by default; hundreds of
		// children would spend most of CI's time in that sleep.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := childRun{lines: strings.Split(strings.TrimSpace(stdout.String()), "\n"), stderr: stderr.String(), err: err}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		r.killed = ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	require.NoError(t, ctx.Err(), "child timed out; stderr:\n%s", r.stderr)
	require.NotContains(t, r.stderr, "panic:", "child panicked")
	return r
}

// record feeds the child's ISSUE and ACK lines to l and returns its other
// lines.
func (r childRun) record(l *oncetest.Ledger) (other []string) {
	for _, line := range r.lines {
		if line != "" && !l.ParseLine(line) {
			other = append(other, line)
		}
	}
	return other
}

// TestKillPoints kills a child process at each crash point of the write
// path (claim taken, before the effect, after the effect before its mark,
// after the mark before the commit, after the commit before the call
// returns), many times over one file per point, and runs the invariant
// check of oncetest.Ledger after every kill. Odd iterations run two
// workers, so kills also land inside group commits of several calls.
func TestKillPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	iters := 50
	if soak() {
		iters = 500
	}
	names := make([]string, 0, len(oncekv.CrashPoints))
	for name := range oncekv.CrashPoints {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "kill.db")
			ledger := oncetest.NewLedger()
			done := 0
			for iter := range iters {
				rng := rand.New(rand.NewPCG(uint64(len(name)), uint64(iter)))
				// Fewer claims than writes are taken (a duplicate claim of a
				// done key takes nothing), so that point comes less often.
				k := 1 + rng.IntN(6)
				if name == "claim-taken" {
					k = 1 + rng.IntN(2)
				}
				// The pool grows by more than the kills use up, so each
				// run meets old keys (duplicates) and fresh ones.
				spec := fmt.Sprintf("%d:%d:%d:%d:%d", rng.Uint64()>>1, 8+20*iter, 8, 1+iter%2, 200)
				run := runWorkloadChild(t, path, spec, fmt.Sprintf("%s:%d", name, k))
				other := run.record(ledger)
				require.True(t, run.killed, "iteration %d: the child was not killed at %s #%d (err %v); said %q; stderr:\n%s",
					iter, name, k, run.err, other, run.stderr)
				done = ledger.Check(t, path, nil)
			}
			t.Logf("kill point %s: %d kills, %d ops issued, %d acknowledged, %d DONE, 0 violations",
				name, iters, ledger.Issued(), ledger.Acked(), done)
		})
	}
}
