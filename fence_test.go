package oncekv_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

var registers = []byte("registers")

// putFenced writes value to key in the registers bucket, with fence, in a
// transaction of its own.
func putFenced(db *oncekv.DB, key string, value []byte, fence uint64) error {
	return db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(registers)
		if err != nil {
			return err
		}
		return b.PutFenced([]byte(key), value, fence)
	})
}

// register is a key of the registers bucket as a reader sees it.
type register struct {
	value   string
	exists  bool
	fence   uint64
	version uint64
}

func readRegister(t testing.TB, db *oncekv.DB, key string) register {
	t.Helper()
	r, err := loadRegister(db, key)
	require.NoError(t, err)
	return r
}

// loadRegister is readRegister for goroutines other than the test's, where
// require must not be called.
func loadRegister(db *oncekv.DB, key string) (register, error) {
	var r register
	err := db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket(registers)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(key))
		r = register{value: string(v), exists: v != nil, fence: b.Fence([]byte(key)), version: b.Version([]byte(key))}
		return nil
	})
	return r, err
}

// update runs fn on the registers bucket in one write transaction.
func update(t testing.TB, db *oncekv.DB, fn func(b *oncekv.Bucket) error) error {
	t.Helper()
	return db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(registers)
		if err != nil {
			return err
		}
		return fn(b)
	})
}

// layouts are the two places a user bucket keeps its keys' fences: in a
// header in front of each value (buckets created by this version), and in
// the system bucket of fences (buckets created before it, which keep that
// layout). Every promise holds in both.
var layouts = []struct {
	name string
	open func(t *testing.T) *oncekv.DB
}{
	{"headers", func(t *testing.T) *oncekv.DB { return oncetest.Open(t, &oncekv.Options{NoSync: true}) }},
	{"records-bucket", openOldRegisters},
}

// forLayouts runs test once per layout of the registers bucket.
func forLayouts(t *testing.T, test func(t *testing.T, db *oncekv.DB)) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) { test(t, l.open(t)) })
	}
}

// openOldRegisters opens a store whose registers bucket was created the
// way the versions before fence headers created it: a bucket with a zero
// sequence, which keeps fences in the system bucket of fences.
func openOldRegisters(t *testing.T) *oncekv.DB {
	path := oldRegistersFile(t)
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, db.Close())
		oncetest.Check(t, path)
	})
	return db
}

// oldRegistersFile is openOldRegisters' store, closed: its path.
func oldRegistersFile(t testing.TB) string { return oldBucketFile(t, registers, false) }

// oldBucketFile is a closed store with a user bucket name created the way
// the versions before fence headers created it, and its path.
func oldBucketFile(t testing.TB, name []byte, noSync bool) string {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: noSync})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket(append([]byte("u/"), name...))
		return err
	}))
	require.NoError(t, b.Close())
	return path
}

// TestPutFencedRejectsTheDelayedWriter is the article's story: the writer of
// set(x,1) takes its token, stalls in a GC pause, and arrives after set(x,2)
// was applied. Each write is applied at most once either way; only the
// fence keeps the late one from winning.
func TestPutFencedRejectsTheDelayedWriter(t *testing.T) {
	forLayouts(t, testPutFencedRejectsTheDelayedWriter)
}

func testPutFencedRejectsTheDelayedWriter(t *testing.T, db *oncekv.DB) {
	first, err := db.NextFence("x")
	require.NoError(t, err)
	second, err := db.NextFence("x")
	require.NoError(t, err)
	require.Greater(t, second, first)

	require.NoError(t, putFenced(db, "x", []byte("2"), second))
	err = putFenced(db, "x", []byte("1"), first) // the writer wakes up
	require.ErrorIs(t, err, oncekv.ErrFenced)
	var fe *oncekv.FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, oncekv.FenceError{Stored: second, Presented: first}, *fe)
	require.Contains(t, err.Error(), `"x"`, "the error names the key")
	require.Contains(t, err.Error(), `"registers"`, "the error names the bucket")
	require.Equal(t, register{value: "2", exists: true, fence: second, version: 1}, readRegister(t, db, "x"))

	// An equal fence is not newer either.
	require.ErrorIs(t, putFenced(db, "x", []byte("2 again"), second), oncekv.ErrFenced)
	require.Equal(t, "2", readRegister(t, db, "x").value)
	require.Equal(t, uint64(2), db.Stats().FencedWrites, "both refusals are counted")
}

// TestPutFencedRandomDelays: writers take store-issued tokens
// concurrently, then write in an order that a seeded shuffle picks (never
// the tokens' order), as writers delayed by GC pauses would arrive. The
// order is enforced with channels, not sleeps, so every run reorders and a
// failure replays from its seed. A write lands exactly when its token is
// greater than every token that arrived before it; a refused writer gets a
// *FenceError naming the stored fence; the value left is the greatest
// token's.
func TestPutFencedRandomDelays(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	const writers = 8
	rejected := 0
	for round := range 15 {
		key := fmt.Sprintf("x%d", round)
		tokens := make([]uint64, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() { tokens[i], errs[i] = db.NextFence(key) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))

		// order[k] is the writer that arrives k-th.
		order := rng.Perm(writers)
		if slices.IsSortedFunc(order, func(a, b int) int { return cmp.Compare(tokens[a], tokens[b]) }) {
			order[0], order[writers-1] = order[writers-1], order[0]
		}
		turn := make([]chan struct{}, writers+1)
		for k := range turn {
			turn[k] = make(chan struct{})
		}
		var (
			mu      sync.Mutex
			applied []uint64 // in commit order
		)
		for k, i := range order {
			wg.Go(func() {
				<-turn[k]
				defer close(turn[k+1])
				errs[i] = update(t, db, func(b *oncekv.Bucket) error {
					if err := b.PutFenced([]byte(key), uintBytes(tokens[i]), tokens[i]); err != nil {
						return err
					}
					mu.Lock()
					applied = append(applied, tokens[i])
					mu.Unlock()
					return nil
				})
			})
		}
		close(turn[0])
		wg.Wait()

		var highest uint64
		var want []uint64
		for _, i := range order {
			if tokens[i] > highest {
				require.NoError(t, errs[i], "seed %d round %d: token %d arrived after %d", seed, round, tokens[i], highest)
				want = append(want, tokens[i])
				highest = tokens[i]
				continue
			}
			rejected++
			var fe *oncekv.FenceError
			require.ErrorAs(t, errs[i], &fe, "seed %d round %d", seed, round)
			require.Equal(t, tokens[i], fe.Presented)
			require.Equal(t, highest, fe.Stored, "refused only behind a newer fence, the one stored")
		}
		require.Equal(t, want, applied, "seed %d round %d", seed, round)
		r := readRegister(t, db, key)
		require.Equal(t, string(uintBytes(highest)), r.value, "seed %d round %d", seed, round)
		require.Equal(t, highest, r.fence)
		require.Equal(t, uint64(len(applied)), r.version)
	}
	require.Positive(t, rejected, "seed %d: no write was reordered; the test proved nothing", seed)
}

// TestPutFencedCommitsWithApply: a fenced write in Apply's effect commits
// with the mark, or not at all. A message refused by the fence is still
// recorded as done, so its redelivery does not try again.
func TestPutFencedCommitsWithApply(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	set := func(value string, fence uint64) func(tx *oncekv.Tx) ([]byte, error) {
		return func(tx *oncekv.Tx) ([]byte, error) {
			b, err := tx.CreateBucketIfNotExists(registers)
			if err != nil {
				return nil, err
			}
			err = b.PutFenced([]byte("x"), []byte(value), fence)
			if errors.Is(err, oncekv.ErrFenced) {
				return []byte("stale, dropped"), nil // give up, and remember that we did
			}
			return []byte("set"), err
		}
	}
	req := func(key string) oncekv.Request { return oncekv.Request{Handler: "config", Key: key} }

	res, err := db.Apply(ctx, req("set-x-2"), set("2", 2))
	require.NoError(t, err)
	require.Equal(t, "set", string(res.Response))
	res, err = db.Apply(ctx, req("set-x-1"), set("1", 1))
	require.NoError(t, err)
	require.Equal(t, "stale, dropped", string(res.Response))
	res, err = db.Apply(ctx, req("set-x-1"), set("1", 1))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, register{value: "2", exists: true, fence: 2, version: 1}, readRegister(t, db, "x"))

	// An effect error rolls the fence back with the value and the mark.
	errUpstream := errors.New("upstream timeout")
	_, err = db.Apply(ctx, req("set-x-3"), func(tx *oncekv.Tx) ([]byte, error) {
		if _, err := set("3", 3)(tx); err != nil {
			return nil, err
		}
		return nil, errUpstream
	})
	require.ErrorIs(t, err, errUpstream)
	require.Equal(t, register{value: "2", exists: true, fence: 2, version: 1}, readRegister(t, db, "x"))
	res, err = db.Apply(ctx, req("set-x-3"), set("3", 3))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, register{value: "3", exists: true, fence: 3, version: 2}, readRegister(t, db, "x"))
}

func TestPutFencedBadInput(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	require.NoError(t, putFenced(db, "k", []byte("v"), 5))
	var leaked *oncekv.Bucket
	require.NoError(t, update(t, db, func(b *oncekv.Bucket) error {
		for _, tc := range []struct {
			name  string
			key   []byte
			value []byte
			fence uint64
			want  error
		}{
			{"fence 0", []byte("k"), []byte("v0"), 0, oncekv.ErrInvalidFence},
			{"fence 0 on a new key", []byte("new"), []byte("v0"), 0, oncekv.ErrInvalidFence},
			{"nil key", nil, []byte("v"), 9, oncekv.ErrKeyRequired},
			{"key too large", make([]byte, bolt.MaxKeySize+1), []byte("v"), 9, oncekv.ErrKeyTooLarge},
		} {
			require.ErrorIs(t, b.PutFenced(tc.key, tc.value, tc.fence), tc.want, tc.name)
		}
		require.ErrorIs(t, b.PutIfVersion(nil, []byte("v"), 0), oncekv.ErrKeyRequired)
		require.ErrorIs(t, b.PutIfVersion(make([]byte, bolt.MaxKeySize+1), []byte("v"), 0), oncekv.ErrKeyTooLarge)
		require.Zero(t, b.Fence(nil))
		require.Zero(t, b.Version(nil))
		require.Zero(t, b.Fence([]byte("never written")))
		leaked = b
		return nil
	}))
	require.Equal(t, register{value: "v", exists: true, fence: 5, version: 1}, readRegister(t, db, "k"),
		"bad input must change nothing")
	require.False(t, readRegister(t, db, "new").exists)

	require.ErrorIs(t, leaked.PutFenced([]byte("k"), []byte("v"), 9), oncekv.ErrTxClosed)
	require.ErrorIs(t, leaked.PutIfVersion([]byte("k"), []byte("v"), 1), oncekv.ErrTxClosed)
	require.Zero(t, leaked.Fence([]byte("k")), "a bucket outlives its transaction only as a dead handle")
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket(registers)
		require.ErrorIs(t, b.PutFenced([]byte("k"), []byte("v"), 9), oncekv.ErrTxNotWritable)
		require.ErrorIs(t, b.PutIfVersion([]byte("k"), []byte("v"), 1), oncekv.ErrTxNotWritable)
		require.Equal(t, uint64(5), b.Fence([]byte("k")), "fences are readable in a read transaction")
		return nil
	}))
}

// TestDeleteKeepsTheFence: a deleted key keeps its fence, so a stale writer
// cannot bring it back, and its version moves on, so a compare-and-set
// that read it before the delete fails. Deleting the whole bucket keeps
// the fences too.
func TestDeleteKeepsTheFence(t *testing.T) { forLayouts(t, testDeleteKeepsTheFence) }

func testDeleteKeepsTheFence(t *testing.T, db *oncekv.DB) {
	require.NoError(t, putFenced(db, "k", []byte("v"), 5))
	require.NoError(t, update(t, db, func(b *oncekv.Bucket) error { return b.Delete([]byte("k")) }))
	require.Equal(t, register{fence: 5, version: 2}, readRegister(t, db, "k"))
	require.ErrorIs(t, putFenced(db, "k", []byte("zombie"), 4), oncekv.ErrFenced)
	require.False(t, readRegister(t, db, "k").exists, "a stale writer must not resurrect the key")
	require.NoError(t, putFenced(db, "k", []byte("new"), 6))
	require.Equal(t, register{value: "new", exists: true, fence: 6, version: 3}, readRegister(t, db, "k"))

	// A cursor's Delete is a delete too.
	require.NoError(t, update(t, db, func(b *oncekv.Bucket) error {
		c := b.Cursor()
		require.NoError(t, c.Delete(), "nothing under a cursor that has not moved")
		k, _ := c.Seek([]byte("k"))
		require.Equal(t, "k", string(k))
		require.NoError(t, c.Delete())
		require.NoError(t, c.Delete(), "a second Delete without a move deletes nothing")
		return nil
	}))
	require.Equal(t, register{fence: 6, version: 4}, readRegister(t, db, "k"))

	require.NoError(t, db.Update(func(tx *oncekv.Tx) error { return tx.DeleteBucket(registers) }))
	require.ErrorIs(t, putFenced(db, "k", []byte("zombie"), 6), oncekv.ErrFenced)
	require.Equal(t, register{}, readRegister(t, db, "k"), "the refused write rolled back, bucket and all")
	require.NoError(t, putFenced(db, "k", []byte("new bucket"), 7))
	require.Equal(t, register{value: "new bucket", exists: true, fence: 7, version: 5}, readRegister(t, db, "k"))
}

// TestPutIfVersion covers compare-and-set, and how the other writes move
// the version so that mixing them with it cannot lose an update silently.
func TestPutIfVersion(t *testing.T) { forLayouts(t, testPutIfVersion) }

func testPutIfVersion(t *testing.T, db *oncekv.DB) {
	cas := func(key, value string, version uint64) error {
		return update(t, db, func(b *oncekv.Bucket) error { return b.PutIfVersion([]byte(key), []byte(value), version) })
	}
	put := func(key, value string) error {
		return update(t, db, func(b *oncekv.Bucket) error { return b.Put([]byte(key), []byte(value)) })
	}

	// Version 0 creates, once.
	require.NoError(t, cas("k", "a", 0))
	require.Equal(t, register{value: "a", exists: true, version: 1}, readRegister(t, db, "k"))
	err := cas("k", "b", 0)
	require.ErrorIs(t, err, oncekv.ErrVersionConflict)
	var ve *oncekv.VersionError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, oncekv.VersionError{Stored: 1, Presented: 0}, *ve)
	require.NoError(t, cas("k", "b", 1))

	// A plain Put between the read and the compare-and-set is seen.
	read := readRegister(t, db, "k")
	require.NoError(t, put("k", "by Put"))
	require.ErrorIs(t, cas("k", read.value+"+1", read.version), oncekv.ErrVersionConflict)
	require.Equal(t, register{value: "by Put", exists: true, version: 3}, readRegister(t, db, "k"))

	// So is a fenced write, which keeps counting in the same version.
	require.NoError(t, putFenced(db, "k", []byte("fenced"), 7))
	require.Equal(t, register{value: "fenced", exists: true, fence: 7, version: 4}, readRegister(t, db, "k"))
	require.NoError(t, cas("k", "c", 4))
	require.Equal(t, uint64(7), readRegister(t, db, "k").fence, "a compare-and-set keeps the fence")

	// A key that only plain Put ever wrote has no version. Version 0 would
	// not see a racing Put, so it is refused rather than trusted.
	require.NoError(t, put("legacy", "x"))
	require.Equal(t, register{value: "x", exists: true}, readRegister(t, db, "legacy"))
	require.ErrorIs(t, cas("legacy", "y", 0), oncekv.ErrUnversioned)
	require.ErrorIs(t, cas("legacy", "y", 1), oncekv.ErrVersionConflict)
	require.NoError(t, update(t, db, func(b *oncekv.Bucket) error { // bring it under versions
		if err := b.Delete([]byte("legacy")); err != nil {
			return err
		}
		return b.PutIfVersion([]byte("legacy"), []byte("x"), 0)
	}))
	require.Equal(t, register{value: "x", exists: true, version: 1}, readRegister(t, db, "legacy"))
}

// TestPutIfVersionConcurrentIncrements: read-modify-write with
// compare-and-set from many goroutines, each reading in a read transaction
// and writing in a separate write transaction, loses no increment.
func TestPutIfVersionConcurrentIncrements(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	require.NoError(t, update(t, db, func(b *oncekv.Bucket) error { return b.PutIfVersion([]byte("n"), uintBytes(0), 0) }))
	const workers, each = 8, 25
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for done := 0; done < each; {
				r, err := loadRegister(db, "n")
				if err != nil {
					errs[i] = err
					return
				}
				err = update(t, db, func(b *oncekv.Bucket) error {
					return b.PutIfVersion([]byte("n"), uintBytes(readUint([]byte(r.value))+1), r.version)
				})
				switch {
				case err == nil:
					done++
				case !errors.Is(err, oncekv.ErrVersionConflict):
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	r := readRegister(t, db, "n")
	require.Equal(t, uint64(workers*each), readUint([]byte(r.value)), "an increment was lost")
	require.Equal(t, uint64(workers*each+1), r.version)
}

func TestNextFence(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	next := func(resource string) uint64 {
		n, err := db.NextFence(resource)
		require.NoError(t, err)
		return n
	}
	require.Equal(t, []uint64{1, 2, 3}, []uint64{next("a"), next("a"), next("a")})
	require.Equal(t, uint64(1), next("b"), "resources are independent")
	require.Equal(t, uint64(4), next("a"))

	// Concurrent callers never get the same token.
	const workers, each = 8, 50
	tokens := make([][]uint64, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for range each {
				n, err := db.NextFence("c")
				if err != nil {
					errs[i] = err
					return
				}
				tokens[i] = append(tokens[i], n)
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	seen := map[uint64]bool{}
	for _, ts := range tokens {
		require.IsIncreasing(t, ts, "one caller's tokens grow")
		for _, n := range ts {
			require.False(t, seen[n], "token %d issued twice", n)
			seen[n] = true
		}
	}
	require.Len(t, seen, workers*each)
	require.Equal(t, uint64(workers*each+1), next("c"))
}

func TestNextFenceBadInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	_, err = db.NextFence("")
	require.ErrorIs(t, err, oncekv.ErrResourceRequired)
	_, err = db.NextFence(strings.Repeat("r", bolt.MaxKeySize))
	require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
	require.LessOrEqual(t, len(err.Error()), 300, "a huge resource must not make a huge message")
	n, err := db.NextFence(strings.Repeat("r", bolt.MaxKeySize-1))
	require.NoError(t, err, "a resource at the limit is fine")
	require.Equal(t, uint64(1), n)
	require.NoError(t, db.Close())
	_, err = db.NextFence("a")
	require.ErrorIs(t, err, oncekv.ErrClosed)
	oncetest.Check(t, path)
}

// TestFenceTokensSurviveReopen: fencing and claim tokens continue where
// they were after the store is closed and opened again.
func TestFenceTokensSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reopen.db")
	ctx := context.Background()
	var last, lastClaim uint64
	for range 3 {
		db, err := oncekv.Open(path, nil)
		require.NoError(t, err)
		for range 3 {
			n, err := db.NextFence("r")
			require.NoError(t, err)
			require.Greater(t, n, last)
			last = n
		}
		c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint(last)}, time.Minute)
		require.NoError(t, err)
		require.Greater(t, c.Token(), lastClaim)
		lastClaim = c.Token()
		require.NoError(t, db.Close())
	}
	require.Equal(t, uint64(9), last)
	require.Equal(t, uint64(3), lastClaim)
	oncetest.Check(t, path)
}

// TestFenceRecordCorrupt: a damaged fence record or token counter is an
// error naming where it is, on every write that depends on it, never a
// fence silently read as 0. In a bucket with fence headers the damaged
// header is the record, and the value behind it reads as absent.
func TestFenceRecordCorrupt(t *testing.T) {
	for _, tc := range []struct {
		layout string
		where  string // the bucket the error names
		old    bool
	}{{"headers", "u/registers", false}, {"records-bucket", "oncekv.fences/kregisters", true}} {
		t.Run(tc.layout, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.db")
			if tc.old {
				path = oldRegistersFile(t)
			}
			db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
			require.NoError(t, err)
			require.NoError(t, putFenced(db, "k", []byte("v"), 5))
			_, err = db.NextFence("res")
			require.NoError(t, err)
			require.NoError(t, db.Close())

			b, err := bolt.Open(path, 0o600, nil)
			require.NoError(t, err)
			require.NoError(t, b.Update(func(tx *bolt.Tx) error {
				fences := tx.Bucket(layout.FencesRoot)
				keys := tx.Bucket(append([]byte("u/"), registers...))
				if tc.old {
					keys = fences.Bucket(append([]byte("k"), registers...))
				}
				rec := append([]byte(nil), keys.Get([]byte("k"))...)
				rec[3] ^= 0x01
				if err := keys.Put([]byte("k"), rec); err != nil {
					return err
				}
				return fences.Put([]byte("tres"), []byte{1, 2, 3})
			}))
			require.NoError(t, b.Close())

			db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
			require.NoError(t, err)
			defer db.Close()
			for name, write := range map[string]func(b *oncekv.Bucket) error{
				"PutFenced":    func(b *oncekv.Bucket) error { return b.PutFenced([]byte("k"), []byte("w"), 99) },
				"PutIfVersion": func(b *oncekv.Bucket) error { return b.PutIfVersion([]byte("k"), []byte("w"), 1) },
				"Put":          func(b *oncekv.Bucket) error { return b.Put([]byte("k"), []byte("w")) },
				"Delete":       func(b *oncekv.Bucket) error { return b.Delete([]byte("k")) },
			} {
				err := update(t, db, write)
				require.ErrorIs(t, err, oncekv.ErrCorrupt, name)
				var re *oncekv.RecordError
				require.ErrorAs(t, err, &re, name)
				require.Equal(t, tc.where, re.Bucket)
				require.Equal(t, "k", re.Key)
			}
			want := register{value: "v", exists: true}
			if tc.old {
				want.fence, want.version = 0, 0 // the damaged record reads as 0 beside the intact value
			} else {
				want = register{} // the value behind a damaged header is not returned
			}
			require.Equal(t, want, readRegister(t, db, "k"))
			require.NoError(t, update(t, db, func(b *oncekv.Bucket) error { return b.Put([]byte("other"), []byte("ok")) }),
				"other keys are not affected")

			_, err = db.NextFence("res")
			require.ErrorIs(t, err, oncekv.ErrCorrupt)
			require.Contains(t, err.Error(), `"res"`)
			n, err := db.NextFence("other")
			require.NoError(t, err)
			require.Equal(t, uint64(1), n)
		})
	}
}

// TestFenceRecordsWrittenBeforeStillWork: a store whose fence record and
// token counter hold the bytes the msgpack-encoder build wrote (printed by
// that build) keeps every promise on them after the codec was written by
// hand: the fence refuses a stale writer, the version moves on, the
// counter issues the next token.
func TestFenceRecordsWrittenBeforeStillWork(t *testing.T) {
	path := oldRegistersFile(t)

	// Fence 5, version 7, as the old build encoded it; the counter of
	// "res" at 3, in the same envelope (version 1, [uint64], CRC-32C).
	oldRecord, err := hex.DecodeString("0192cf0000000000000005cf00000000000000071527d2d1")
	require.NoError(t, err)
	oldCounter := binary.BigEndian.AppendUint64([]byte{1, 0x91, 0xcf}, 3)
	oldCounter = binary.LittleEndian.AppendUint32(oldCounter, crc32.Checksum(oldCounter, crc32.MakeTable(crc32.Castagnoli)))
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(append([]byte("u/"), registers...)).Put([]byte("k"), []byte("v")); err != nil {
			return err
		}
		fences := tx.Bucket(layout.FencesRoot)
		keys, err := fences.CreateBucket(append([]byte("k"), registers...))
		if err != nil {
			return err
		}
		if err := keys.Put([]byte("k"), oldRecord); err != nil {
			return err
		}
		return fences.Put([]byte("tres"), oldCounter)
	}))
	require.NoError(t, b.Close())

	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	require.Equal(t, register{value: "v", exists: true, fence: 5, version: 7}, readRegister(t, db, "k"))
	var fe *oncekv.FenceError
	require.ErrorAs(t, putFenced(db, "k", []byte("stale"), 5), &fe)
	require.Equal(t, uint64(5), fe.Stored)
	require.NoError(t, putFenced(db, "k", []byte("new"), 6))
	require.NoError(t, update(t, db, func(b *oncekv.Bucket) error { return b.Put([]byte("k"), []byte("plain")) }))
	require.Equal(t, register{value: "plain", exists: true, fence: 6, version: 9}, readRegister(t, db, "k"))
	require.NoError(t, update(t, db, func(b *oncekv.Bucket) error { return b.PutIfVersion([]byte("k"), []byte("cas"), 9) }))
	require.Equal(t, register{value: "cas", exists: true, fence: 6, version: 10}, readRegister(t, db, "k"))
	n, err := db.NextFence("res")
	require.NoError(t, err)
	require.Equal(t, uint64(4), n)
}

func TestTxNextFenceSharesCounterAndRollsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	first, err := db.NextFence("r")
	require.NoError(t, err)

	var inTx []uint64
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		for range 3 {
			tok, err := tx.NextFence("r")
			require.NoError(t, err)
			inTx = append(inTx, tok)
		}
		return nil
	}))
	require.Equal(t, []uint64{first + 1, first + 2, first + 3}, inTx)

	// Rolled back: the next token is as if they were never issued.
	boom := errors.New("boom")
	require.ErrorIs(t, db.Update(func(tx *oncekv.Tx) error {
		_, err := tx.NextFence("r")
		require.NoError(t, err)
		return boom
	}), boom)
	next, err := db.NextFence("r")
	require.NoError(t, err)
	require.Equal(t, first+4, next)

	// Bad input and read-only transactions: typed errors naming the resource.
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		_, err := tx.NextFence("")
		require.ErrorIs(t, err, oncekv.ErrResourceRequired)
		return nil
	}))
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		_, err := tx.NextFence("r")
		require.ErrorIs(t, err, oncekv.ErrTxNotWritable)
		require.Contains(t, err.Error(), `"r"`)
		return nil
	}))

	// Persisted across reopen.
	require.NoError(t, db.Close())
	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		tok, err := tx.NextFence("r")
		require.Equal(t, first+5, tok)
		return err
	}))
}
