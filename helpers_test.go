// The shared helpers of the root package's tests: the test binary as its
// own child process (TestMain, startChild and the prologues every crash
// test starts with), the workload child the kill-point and system-call
// fault tests run, strace, and the soak switch. Their platform halves are
// helpers_unix_test.go and helpers_other_test.go.

package oncekv_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
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

// crashChildEnv names the database a re-executed test binary works on when
// it runs as the crash test's child.
const crashChildEnv = "ONCEKV_CRASH_CHILD_DB"

// TestMain lets the test binary double as the crash test's child process.
func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		if os.Getenv(workloadChildEnv) != "" {
			workloadChild(path)
			return
		}
		crashChild(path)
		return
	}
	os.Exit(m.Run())
}

// soak reports whether the long runs were asked for (ONCEKV_SOAK=1).
func soak() bool { return os.Getenv("ONCEKV_SOAK") == "1" }

// needChildren is the prologue of every test that spawns child processes:
// it skips the test under -short.
func needChildren(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("spawns child processes")
	}
}

// isChild is the prologue of a test that re-runs itself as its own child
// process (startChild with the test's name and env): in the child, where
// env is set, it runs child on env's value and reports true, and the test
// returns at once; in the parent it reports false.
func isChild(env string, child func(value string)) bool {
	if value := os.Getenv(env); value != "" {
		child(value)
		return true
	}
	return false
}

// childOnly is the prologue of a test that is only another test's child
// process: it returns env's value, which startChild set, or skips the test
// run directly, saying whose child it is.
func childOnly(t *testing.T, env, parent string) string {
	t.Helper()
	value := os.Getenv(env)
	if value == "" {
		t.Skip("runs only as the child of " + parent)
	}
	return value
}

// startChild re-runs this test binary as a child process, running only the
// tests that match run (none, for a child that TestMain dispatches), with
// env=value added to its environment so that it knows it is the child. It
// returns the running child and a scanner over its standard output; the
// caller kills it (childProcess.kill) or waits for it.
func startChild(t *testing.T, run, env, value string) (*childProcess, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run)
	cmd.Env = append(os.Environ(), env+"="+value)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	return &childProcess{cmd: cmd, lines: lines}, lines
}

// childProcess is a child started by startChild.
type childProcess struct {
	cmd    *exec.Cmd
	lines  *bufio.Scanner
	waited error // what Wait returned, once kill has run
}

// kill sends the child SIGKILL, hands each line the child had written
// before it died to rest (unless rest is nil: then they are not read), and
// waits for it to end, keeping Wait's error in waited. It returns the
// signal's error.
func (c *childProcess) kill(rest func(line string)) error {
	err := c.cmd.Process.Signal(syscall.SIGKILL)
	if rest != nil {
		for c.lines.Scan() {
			rest(c.lines.Text())
		}
	}
	c.waited = c.cmd.Wait()
	return err
}

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
				killSelf()
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

// needStrace returns strace's path, or skips the test when strace cannot
// run here (.ci/run installs it; a container may forbid ptrace).
func needStrace(t *testing.T) string {
	t.Helper()
	needChildren(t)
	path, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (apt-get install strace; .ci/run does it): skipping system-call fault injection")
	}
	if out, err := exec.Command(path, "-f", "-qq", "-o", os.DevNull, "true").CombinedOutput(); err != nil {
		t.Skipf("strace cannot trace here (%v: %s): skipping system-call fault injection", err, out)
	}
	return path
}
