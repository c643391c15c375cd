package oncekv_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

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
// every write until it is reopened.
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
