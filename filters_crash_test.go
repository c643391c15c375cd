package oncekv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// bloomChildEnv names the file a re-executed test binary fills as the
// child of TestFiltersNoFalseNegativeAfterKill.
const bloomChildEnv = "ONCEKV_BLOOM_CHILD_DB"

// bloomStart and bloomStep drive the child's clock: every Apply moves it
// on by bloomStep, so the child crosses many windows and seals (persists)
// the filter of each before the next one opens.
var bloomStart = time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)

const bloomStep = 7 * time.Minute

// TestFiltersNoFalseNegativeAfterKill kills a child that applies
// keys across many windows, then checks that every key with a mark in the
// file is answered as a duplicate, without running its effect: after the
// kill, after expiring the oldest windows, and after a clean reopen. A
// filter that forgot a key (a false negative, say a sealed filter
// persisted without its last keys, or a newest window rebuilt short)
// would let the effect run again.
func TestFiltersNoFalseNegativeAfterKill(t *testing.T) {
	if isChild(bloomChildEnv, bloomChild) {
		return
	}
	needChildren(t)
	path := filepath.Join(t.TempDir(), "bloom.db")
	child, lines := startChild(t, "^TestFiltersNoFalseNegativeAfterKill$", bloomChildEnv, path)
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

// newestFilterChildEnv tells a re-executed test binary to run
// newestFilterChild on the store it names.
const newestFilterChildEnv = "ONCEKV_NEWEST_FILTER_CHILD_DB"

// TestNewestFilterRebuiltAfterSIGKILL: a store is closed cleanly, so it
// holds a persisted filter of its newest window; a child process reopens
// it, writes marks into that window and is killed with SIGKILL. The
// persisted filter lacks those marks, so the next Open must rebuild it, and
// every mark the child had written is a duplicate.
func TestNewestFilterRebuiltAfterSIGKILL(t *testing.T) {
	if isChild(newestFilterChildEnv, newestFilterChild) {
		return
	}
	needChildren(t)
	clock := oncetest.NewClock(newestFilterEpoch)
	path := closedStore(t, clock, "parent", 200)

	child, lines := startChild(t, "^TestNewestFilterRebuiltAfterSIGKILL$", newestFilterChildEnv, path)
	var acked []string
	for lines.Scan() {
		line := lines.Text()
		if key, ok := strings.CutPrefix(line, "ACK "); ok {
			acked = append(acked, key)
			continue
		}
		require.Equal(t, "READY", line)
		break
	}
	require.NoError(t, child.kill(nil))
	require.Len(t, acked, 300, "the child acknowledged every mark")

	db, err := oncekv.Open(path, newestFilterOpts(clock))
	require.NoError(t, err)
	defer db.Close()
	for _, key := range acked {
		res, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)}, mustNotRunApply(t))
		require.NoError(t, err)
		require.True(t, res.Duplicate, key)
		require.Equal(t, key, string(res.Response))
	}
	require.Zero(t, applyKeys(t, db, "parent", 200, 4))
	require.Equal(t, 1, oncekv.FiltersRebuiltAtOpen(db), "the persisted filter predates the child's marks")
}

// newestFilterChild reopens the store at path on the parent's clock (so its
// marks go into the same newest window), applies child0 ... child299 one by
// one, durably, printing "ACK key" after each, says READY and waits to be
// killed.
func newestFilterChild(path string) {
	db, err := oncekv.Open(path, newestFilterOpts(oncetest.NewClock(newestFilterEpoch)))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	for i := range 300 {
		key := "child" + strconv.Itoa(i)
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)},
			func(*oncekv.Tx) ([]byte, error) { return []byte(key), nil })
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("ACK", key)
	}
	fmt.Println("READY")
	select {}
}
