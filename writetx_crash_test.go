//go:build unix

package oncekv_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// TestKillPoints kills a child process at each crash point of the write
// path (claim taken, before the effect, after the effect before its mark,
// after the mark before the commit, after the commit before the call
// returns), many times over one file per point, and runs the invariant
// check of oncetest.Ledger after every kill. Odd iterations run two
// workers, so kills also land inside group commits of several calls.
// 50 kills per point; a soak run (ONCEKV_SOAK=1) makes it 500.
func TestKillPoints(t *testing.T) {
	needChildren(t)
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

// faultSyscalls are the system calls of bbolt's commit that the tests
// below fail or kill at: page and meta writes, their fdatasync, and the
// ftruncate that grows the file.
var faultSyscalls = []string{"fdatasync", "pwrite64", "ftruncate"}

// straceArgs is the command prefix that runs a child under strace with
// expr as its -e inject expression (none when empty), tracing only the
// fault syscalls. Not with --seccomp-bpf, which would be faster: strace 6.1
// then silently drops signal= injections (errors still work), and the kill
// runs would kill nothing.
func straceArgs(strace, inject, output string) []string {
	args := []string{strace, "-f", "-qq", "-o", output, "-e", "trace=" + strings.Join(append(faultSyscalls, "fsync"), ",")}
	if inject != "" {
		args = append(args, "-e", "inject="+inject)
	}
	return args
}

// traceLine matches a system call in strace -f output: "<tid> <name>(".
var traceLine = regexp.MustCompile(`^(\d+) +([a-z0-9_]+)\(`)

// countCalls runs the workload spec once under strace on a fresh file and
// returns how many times each fault syscall was made, by the thread that
// made most of them (strace counts when=N per thread; the workload child
// keeps its writes on one thread), and the whole trace.
func countCalls(t *testing.T, strace, spec string) (map[string]int, string) {
	t.Helper()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	run := runWorkloadChild(t, filepath.Join(dir, "count.db"), spec, "", straceArgs(strace, "", trace)...)
	require.NoError(t, run.err, "stderr:\n%s", run.stderr)
	f, err := os.Open(trace)
	require.NoError(t, err)
	defer f.Close()
	perThread := map[string]map[string]int{}
	var all strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		all.WriteString(sc.Text() + "\n")
		m := traceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if perThread[m[2]] == nil {
			perThread[m[2]] = map[string]int{}
		}
		perThread[m[2]][m[1]]++
	}
	counts := map[string]int{}
	for _, sys := range faultSyscalls {
		for _, n := range perThread[sys] {
			counts[sys] = max(counts[sys], n)
		}
	}
	return counts, all.String()
}

// syscallFault is one way to fail a system call.
type syscallFault struct {
	name   string
	action string // strace's inject action
	every  bool   // from the N-th call on (when=N+), not only the N-th
}

var syscallFaults = []syscallFault{
	{"kill", "signal=SIGKILL", false},
	{"EIO-once", "error=EIO", false},
	{"EIO-persistent", "error=EIO", true},
	{"ENOSPC-once", "error=ENOSPC", false},
	{"ENOSPC-persistent", "error=ENOSPC", true},
}

// TestSyscallFaults steps N through every fdatasync, pwrite64 and ftruncate
// call of a small workload (Open of a fresh file included), for two seeds,
// and at each N kills the child there (SIGKILL), or fails the call with
// EIO or ENOSPC, once or from then on. After each run the file passes the
// invariant check of oncetest.Ledger: nothing acknowledged without its
// commit, effect and mark both or neither. A failed call must also give a
// clear error and no panic, reads keep working, and after an fdatasync
// error (or any I/O error but ENOSPC from a page write) the store refuses
// every write until it is reopened. A soak run (ONCEKV_SOAK=1) takes eight
// seeds.
func TestSyscallFaults(t *testing.T) {
	strace := needStrace(t)
	seeds := []uint64{1, 2}
	if soak() {
		seeds = append(seeds, 3, 4, 5, 6, 7, 8)
	}
	for _, seed := range seeds {
		spec := fmt.Sprintf("%d:6:10:1:0", seed)
		counts, trace := countCalls(t, strace, spec)
		require.Positive(t, counts["fdatasync"], "no fdatasync traced:\n%s", trace)
		for _, sys := range faultSyscalls {
			for _, fault := range syscallFaults {
				t.Run(fmt.Sprintf("seed%d/%s/%s", seed, sys, fault.name), func(t *testing.T) {
					t.Parallel()
					seen := map[string]int{} // how the runs ended, for the log
					// One past the last call too: the fault never fires.
					for n := 1; n <= counts[sys]+1; n++ {
						when := fmt.Sprint(n)
						if fault.every {
							when += "+"
						}
						inject := fmt.Sprintf("%s:%s:when=%s", sys, fault.action, when)
						end := checkSyscallFault(t, strace, spec, sys, fault, inject)
						if fault.name == "kill" {
							// The workload is deterministic: the N-th call
							// comes, so the kill must land.
							require.Equal(t, n <= counts[sys], end == "killed", "inject %s ended %s", inject, end)
						}
						seen[end]++
					}
					t.Logf("%s x %s: N = 1..%d, 0 violations; runs ended %v", sys, fault.name, counts[sys]+1, seen)
				})
			}
		}
	}
}

// checkSyscallFault runs the workload once with inject and checks what it
// left. It returns how the run ended: "killed", "open-failed", "poisoned",
// "nospace" or "clean".
func checkSyscallFault(t *testing.T, strace, spec, sys string, fault syscallFault, inject string) (end string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fault.db")
	run := runWorkloadChild(t, path, spec, "", straceArgs(strace, inject, os.DevNull)...)
	ledger := oncetest.NewLedger()
	other := run.record(ledger)
	msg := fmt.Sprintf("inject %s: said %q; stderr:\n%s", inject, other, run.stderr)
	end = "clean"
	if fault.name == "kill" {
		if !run.killed { // the workload made fewer calls: it must have ended well
			require.NoError(t, run.err, msg)
			require.Contains(t, other, "END", msg)
		} else {
			end = "killed"
		}
	} else {
		require.NoError(t, run.err, msg)
		end = checkFaultLines(t, sys, other, msg)
	}
	if _, err := os.Stat(path); err == nil {
		ledger.Check(t, path, nil)
		if fault.name != "kill" {
			// Reopening clears the poison: writes work again.
			db, err := oncekv.Open(path, nil)
			require.NoError(t, err, msg)
			require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("after"))
				if err != nil {
					return err
				}
				return b.Put([]byte("k"), []byte("v"))
			}), msg)
			require.NoError(t, db.Close())
		}
	}
	return end
}

// checkFaultLines checks a child's non-ACK lines after an I/O error: every
// error is a clear oncekv error; reads worked; an fdatasync error poisoned
// the store, and once poisoned it refused every later write. The one
// answer besides those is ErrInProgress for a claim of a key whose earlier
// claim failed to complete: that claim still holds the key. It returns
// how the run ended, as checkSyscallFault does.
func checkFaultLines(t *testing.T, sys string, lines []string, msg string) string {
	t.Helper()
	if len(lines) > 0 && strings.HasPrefix(lines[0], "OPEN-ERR") {
		require.Contains(t, lines[0], "oncekv: open", msg)
		return "open-failed"
	}
	end := "clean"
	require.GreaterOrEqual(t, len(lines), 2, msg)
	require.Equal(t, []string{"READ ok", "END"}, lines[len(lines)-2:], msg)
	poisoned := false
	failed := map[string]bool{} // ops that got an error before
	for _, line := range lines[:len(lines)-2] {
		f := strings.SplitN(line, " ", 4)
		require.Len(t, f, 4, msg)
		require.Equal(t, "ERR", f[0], msg)
		require.Contains(t, f[3], "oncekv: ", msg)
		id := f[1]
		again := failed[id]
		failed[id] = true
		switch class := f[2]; {
		case class == "inprogress" && again && strings.HasPrefix(id, "claim/"):
			// A claim whose Complete failed still holds its key until its
			// lease ends; the workload's next claim of the key is answered
			// from that mark (a read, so a poisoned store gives it too).
		case poisoned:
			// Once poisoned, every write is refused with the poison.
			require.Equal(t, "poisoned", class, msg)
		case class == "poisoned":
			poisoned, end = true, "poisoned"
		case sys == "fdatasync":
			require.Fail(t, "an fdatasync error must poison the store, got "+class, msg)
		default:
			// ENOSPC from a page write before anything became visible.
			require.Equal(t, "nospace", class, msg)
			end = "nospace"
		}
	}
	return end
}

// smallDisk mounts a tmpfs of size on a temporary directory and returns it,
// or skips the test where mounting is not permitted.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("mounts a file system")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs here (%v: %s): skipping the real full-disk test", size, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		// Lazy, so that a failed test holding the file open still unmounts.
		out, err := exec.Command("umount", "-l", dir).CombinedOutput()
		require.NoError(t, err, "umount %s: %s", dir, out)
	})
	return dir
}

// TestFullDisk fills a real 2 MiB file system until commits fail, and
// checks: the failure is ErrNoSpace, wrapping syscall.ENOSPC, and applies
// nothing; reads and duplicates are still answered; the store is not
// poisoned, so writes resume, without a reopen, once space is freed; and
// the file passes the checks after all that.
func TestFullDisk(t *testing.T) {
	dir := smallDisk(t, "2m")
	// Ballast takes most of the space, so that freeing it later is easy.
	ballast := filepath.Join(dir, "ballast")
	require.NoError(t, os.WriteFile(ballast, make([]byte, 1<<20), 0o600))
	path := filepath.Join(dir, "full.db")
	db, err := oncekv.Open(path, &oncekv.Options{ExpireInterval: -1})
	require.NoError(t, err)
	ctx := context.Background()

	value := bytes.Repeat([]byte("v"), 16<<10)
	put := func(i int) (oncekv.Result, error) {
		key := fmt.Sprint("fill-", i)
		return db.Apply(ctx, oncekv.Request{Handler: "fill", Key: key}, func(tx *oncekv.Tx) ([]byte, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("fill"))
			if err != nil {
				return nil, err
			}
			return []byte(key), b.Put([]byte(key), value)
		})
	}
	acked := 0
	for ; ; acked++ {
		_, err = put(acked)
		if err != nil {
			break
		}
		require.Less(t, acked, 200, "2 MiB never filled up")
	}
	require.Positive(t, acked)
	require.ErrorIs(t, err, oncekv.ErrNoSpace)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NotErrorIs(t, err, oncekv.ErrPoisoned)
	t.Logf("disk full after %d applies: %v", acked, err)

	// The failed request applied nothing; reads and duplicates still work.
	full := acked
	res, err := put(0)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.Equal(t, value, tx.Bucket([]byte("fill")).Get([]byte("fill-0")))
		require.Nil(t, tx.Bucket([]byte("fill")).Get([]byte(fmt.Sprint("fill-", full))))
		return nil
	}))
	// Still full: the same clear error, still not poisoned. Or, as a stress
	// run saw once, the retry fits: bbolt may place its pages differently
	// the second time (in pages freed since, or in blocks the failed
	// attempt's writes already took).
	if _, err = put(full); err != nil {
		require.ErrorIs(t, err, oncekv.ErrNoSpace)
		require.NotErrorIs(t, err, oncekv.ErrPoisoned)
	}

	// Space freed: writes resume without a reopen.
	require.NoError(t, os.Remove(ballast))
	for i := full; i < full+20; i++ {
		_, err := put(i)
		require.NoError(t, err, "apply %d after freeing space", i)
	}
	require.NoError(t, db.Close())
	oncetest.Check(t, path)

	db, err = oncekv.Open(path, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	for i := range full + 20 {
		res, err := put(i)
		require.NoError(t, err)
		require.True(t, res.Duplicate, "fill-%d", i)
		require.Equal(t, fmt.Sprint("fill-", i), string(res.Response))
	}
}
