//go:build unix

package oncekv_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// applierCrashEnv tells TestApplierSIGKILLBetweenCommitAndDone's child
// what to do: "<db path>|<crash point>:<k>|<seed>|<pool>".
const applierCrashEnv = "ONCEKV_APPLIER_CRASH"

// applierCrashChild submits 300 Apply ops of oncetest's canonical effect
// over keys k0..k<pool-1> (so deliveries of one key share a pipeline
// window) through one Applier, printing an IssueLine before each Submit
// and, from done, an AckLine, until it SIGKILLs itself the k-th time the
// write path reaches the crash point.
func applierCrashChild(spec string) {
	parts := strings.Split(spec, "|")
	var seed uint64
	var pool, want int
	name, k, _ := strings.Cut(parts[1], ":")
	point, ok := oncekv.CrashPoints[name]
	_, err1 := fmt.Sscan(k, &want)
	_, err2 := fmt.Sscan(parts[2], &seed)
	_, err3 := fmt.Sscan(parts[3], &pool)
	if !ok || err1 != nil || err2 != nil || err3 != nil {
		fmt.Println("BAD-SPEC", spec)
		os.Exit(2)
	}
	db, err := oncekv.Open(parts[0], &oncekv.Options{ExpireInterval: -1, OpenTimeout: 10 * time.Second})
	if err != nil {
		fmt.Println("OPEN-ERR", oneLine(err))
		os.Exit(2)
	}
	var hits atomic.Int64
	oncekv.SetCrashHook(db, func(p oncekv.CrashPoint) {
		if p == point && hits.Add(1) == int64(want) {
			killSelf()
			select {} // never returns: the signal is on its way
		}
	})
	a, err := db.NewApplier(oncekv.ApplierOptions{MaxInFlight: 32})
	if err != nil {
		fmt.Println("APPLIER-ERR", oneLine(err))
		os.Exit(2)
	}
	var mu sync.Mutex // one line at a time; each is one write(2), so a kill never splits one
	say := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Println(s)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for range 300 {
		op := oncetest.NewOp("apply", fmt.Sprint("k", rng.IntN(pool)), false)
		say(oncetest.IssueLine(op))
		if err := a.Submit(context.Background(), op.Request(), op.Effect, func(res oncekv.Result, err error) {
			if err != nil {
				say(fmt.Sprintf("ERR %s %s", op.ID(), oneLine(err)))
				return
			}
			say(oncetest.AckLine(op.ID(), res.Response))
		}); err != nil {
			say("SUBMIT-ERR " + oneLine(err))
		}
	}
	_ = a.Close()
	_ = db.Close()
	say("END")
}

// TestApplierSIGKILLBetweenCommitAndDone kills a child process that is
// pipelining requests through an Applier (the test binary re-run, with
// SIGKILL at a crash point of the write path): after the commit of a
// batch, before any of its done callbacks ran; before a commit, when the
// effects and marks are written but not committed; after an effect. After
// each kill oncetest.Ledger checks the reopened file: every request the
// child acknowledged from done is applied exactly once, with its mark and
// its response (so no done ran before its commit), every other one is
// applied once or not at all, and replaying every op changes nothing.
func TestApplierSIGKILLBetweenCommitAndDone(t *testing.T) {
	if isChild(applierCrashEnv, applierCrashChild) {
		return
	}
	needChildren(t)
	iters := 8
	if soak() {
		iters = 80
	}
	for _, name := range []string{"after-commit", "before-commit", "after-effect"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "applier.db")
			ledger := oncetest.NewLedger()
			for iter := range iters {
				rng := rand.New(rand.NewPCG(uint64(len(name)), uint64(iter)))
				k := 1 + rng.IntN(5)
				if name == "after-effect" {
					k = 1 + rng.IntN(15) // once per effect, not per commit; 20 keys at least
				}
				spec := fmt.Sprintf("%s|%s:%d|%d|%d", path, name, k, rng.Uint64()>>1, 20+30*iter)
				child, lines := startChild(t, "^TestApplierSIGKILLBetweenCommitAndDone$", applierCrashEnv, spec)
				var other []string
				for lines.Scan() {
					if !ledger.ParseLine(lines.Text()) {
						other = append(other, lines.Text())
					}
				}
				err := child.cmd.Wait()
				require.Error(t, err, "iteration %d: the child was not killed at %s #%d; said %q", iter, name, k, other)
				require.Contains(t, err.Error(), "killed", "iteration %d: said %q", iter, other)
				require.Empty(t, other, "iteration %d", iter)
				ledger.Check(t, path, nil)
			}
			require.Positive(t, ledger.Acked(), "some requests were acknowledged")
			t.Logf("%s: %d kills, %d ops issued, %d acknowledged, 0 violations", name, iters, ledger.Issued(), ledger.Acked())
		})
	}
}
