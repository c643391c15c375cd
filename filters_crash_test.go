package oncekv_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// The Bloom filters as adversaries. A filter may only ever say "maybe"
// where it could say "no"; these hooks do so always, or on a coin toss.
// Correctness must not change: the filter is a hint that saves a B-tree
// read, never a source of truth. Each is built from the seed its test
// logs, so that a failure can be replayed.
var adversaries = map[string]func(seed uint64) func(bool) bool{
	"always-maybe":        func(uint64) func(bool) bool { return func(bool) bool { return true } },
	"half-false-positive": coinToss,
}

// coinToss answers "maybe" half of the time, from a generator seeded with
// seed. Many goroutines ask at once, so it takes turns.
func coinToss(seed uint64) func(bool) bool {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 0xc01))
	return func(bool) bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(2) == 0
	}
}

// TestAdversaryHistory runs the linearizability test of history_test.go
// with each adversarial filter, each for a quarter of its duration.
func TestAdversaryHistory(t *testing.T) {
	for name, adversary := range adversaries {
		t.Run(name, func(t *testing.T) { runHistory(t, historyDuration(t, 0.25), adversary) })
	}
}

// TestAdversaryModel runs the model state machine of
// reliability_model_test.go with each adversarial filter, a quarter of
// the plain test's checks each.
func TestAdversaryModel(t *testing.T) {
	for name, adversary := range adversaries {
		t.Run(name, func(t *testing.T) {
			withRapidChecks(t, modelChecks/4, func() {
				rapid.Check(t, func(rt *rapid.T) {
					// Drawn, so rapid's own seed replays the filter's answers.
					runModel(t, rt, adversary(rapid.Uint64().Draw(rt, "filter seed")))
				})
			})
		})
	}
}

// bloomChildEnv names the file a re-executed test binary fills as the
// child of TestAdversaryBloomNoFalseNegativeAfterKill.
const bloomChildEnv = "ONCEKV_BLOOM_CHILD_DB"

// bloomStart and bloomStep drive the child's clock: every Apply moves it
// on by bloomStep, so the child crosses many windows and seals (persists)
// the filter of each before the next one opens.
var bloomStart = time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)

const bloomStep = 7 * time.Minute

// TestAdversaryBloomNoFalseNegativeAfterKill kills a child that applies
// keys across many windows, then checks that every key with a mark in the
// file is answered as a duplicate, without running its effect: after the
// kill, after expiring the oldest windows, and after a clean reopen. A
// filter that forgot a key (a false negative, say a sealed filter
// persisted without its last keys, or a newest window rebuilt short)
// would let the effect run again.
func TestAdversaryBloomNoFalseNegativeAfterKill(t *testing.T) {
	if isChild(bloomChildEnv, bloomChild) {
		return
	}
	needChildren(t)
	path := filepath.Join(t.TempDir(), "bloom.db")
	child, lines := startChild(t, "^TestAdversaryBloomNoFalseNegativeAfterKill$", bloomChildEnv, path)
	acked := 0
	for acked < 400 && lines.Scan() {
		require.True(t, strings.HasPrefix(lines.Text(), "ACK "), "child said %q", lines.Text())
		acked++
	}
	require.NoError(t, child.kill(func(line string) {
		if strings.HasPrefix(line, "ACK ") {
			acked++
		}
	}))

	keys := storedKeys(t, path)
	require.GreaterOrEqual(t, len(keys), acked, "every acknowledged key has a mark")
	// The child's clock stood at most one step past its last mark.
	clock := oncetest.NewClock(bloomStart.Add(time.Duration(len(keys)+1) * bloomStep))
	opts := &oncekv.Options{Now: clock.Now, ExpireInterval: -1, Retention: 12 * time.Hour}
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	probeStored(t, db, keys, "after the kill")

	clock.Advance(6 * time.Hour)
	st, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.NotZero(t, st.Windows, "the test should expire some windows")
	require.NoError(t, db.Close())
	keys = storedKeys(t, path)
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	probeStored(t, db, keys, "after expiry and reopen")
	require.NoError(t, db.Close())
	oncetest.Check(t, path)
}

// bloomChild applies keys b0, b1, ... one at a time, moving its clock on
// by bloomStep before each, and prints "ACK key" after each, until it is
// killed.
func bloomChild(path string) {
	clock := oncetest.NewClock(bloomStart)
	db, err := oncekv.Open(path, &oncekv.Options{Now: clock.Now, ExpireInterval: -1, Retention: 12 * time.Hour})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	for i := 0; ; i++ {
		clock.Advance(bloomStep)
		key := fmt.Sprint("b", i)
		if _, err := db.Apply(context.Background(), oncekv.Request{Handler: "bloom", Key: key}, deposit("bloom", 1)); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("ACK", key)
	}
}

// storedKeys lists the (handler, key) of every mark in the closed file at
// path, read straight from bbolt, past expired windows not yet deleted.
func storedKeys(t *testing.T, path string) [][2]string {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer b.Close()
	var keys [][2]string
	require.NoError(t, b.View(func(tx *bolt.Tx) error {
		exp, err := layout.ReadExpiry(tx)
		if err != nil {
			return err
		}
		return layout.ForEachWindow(tx, false, func(start int64, w *bolt.Bucket) error {
			if start < exp.Floor {
				return nil
			}
			return w.ForEach(func(k, _ []byte) error {
				h, key, ok := layout.SplitMarkKey(k)
				require.True(t, ok)
				keys = append(keys, [2]string{h, key})
				return nil
			})
		})
	}))
	return keys
}

// probeStored applies every stored key again with an effect that must not
// run: each must come back as a duplicate.
func probeStored(t *testing.T, db *oncekv.DB, keys [][2]string, when string) {
	t.Helper()
	for _, k := range keys {
		res, err := db.Apply(context.Background(), oncekv.Request{Handler: k[0], Key: k[1]},
			func(*oncekv.Tx) ([]byte, error) { return nil, errNotApplied })
		require.NoError(t, err, "%s: key %s/%s", when, k[0], k[1])
		require.True(t, res.Duplicate, "%s: key %s/%s", when, k[0], k[1])
	}
}
