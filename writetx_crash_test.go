package oncekv_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
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
