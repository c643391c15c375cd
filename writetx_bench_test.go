package oncekv_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
)

// BenchmarkBytesPerMark loads sizeKeys requests the way the bench module's
// size cell does (ApplyBatch of 500 with sync off, each effect a 64-byte
// row under the request's key, a 64-byte response), closes the store and
// reports the file's allocated bytes per key, and, from bbolt's bucket
// statistics, the bytes of pages the marks and the effect rows take. Keys
// come in ascending order (offsets, ULIDs) or in random order (UUIDv4).
// It measures space, not time: run it with -benchtime 1x.
func BenchmarkBytesPerMark(b *testing.B) {
	const sizeKeys = 20_000
	for _, order := range []string{"ascending", "random"} {
		b.Run(order, func(b *testing.B) {
			for b.Loop() {
				path := filepath.Join(b.TempDir(), "size.db")
				loadSizeKeys(b, path, batchesOf(sizeKeys, order == "random"))
				st, err := os.Stat(path)
				require.NoError(b, err)
				marks, rows := sizeStats(b, path)
				alloc := func(s bolt.BucketStats) float64 { return float64(s.BranchAlloc+s.LeafAlloc) / sizeKeys }
				b.ReportMetric(float64(diskBytes(st))/sizeKeys, "file-B/key")
				b.ReportMetric(alloc(marks), "mark-B/key")
				b.ReportMetric(alloc(rows), "row-B/key")
			}
		})
	}
}

// batchesOf returns n keys in batches of 500, ascending or shuffled.
func batchesOf(n int, random bool) [][]string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("size-%09d", i)
	}
	if random {
		rng := rand.New(rand.NewPCG(1, 2))
		rng.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	}
	var batches [][]string
	for lo := 0; lo < n; lo += 500 {
		batches = append(batches, keys[lo:min(lo+500, n)])
	}
	return batches
}

// loadSizeKeys applies one ApplyBatch per batch in a new store at path,
// sync off, and closes it. Each effect writes a 64-byte row under the
// request's key in bucket "effects"; each response is 64 bytes.
func loadSizeKeys(t testing.TB, path string, batches [][]string) {
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	require.NoError(t, err)
	fill := func(seed string) []byte {
		v := make([]byte, 64)
		for i := range v {
			v[i] = seed[i%len(seed)]
		}
		return v
	}
	for _, batch := range batches {
		reqs := make([]oncekv.Request, 0, len(batch))
		for _, k := range batch {
			reqs = append(reqs, oncekv.Request{Handler: "bench", Key: k, Payload: fill(k + "p")})
		}
		res, err := db.ApplyBatch(context.Background(), reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
			bk, err := tx.CreateBucketIfNotExists([]byte("effects"))
			if err != nil {
				return nil, err
			}
			return fill("r" + reqs[i].Key), bk.Put([]byte(reqs[i].Key), fill(reqs[i].Key))
		})
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
	}
	require.NoError(t, db.Close())
}

// sizeStats returns bbolt's statistics of the closed store at path: of
// its window buckets together, and of user bucket "effects".
func sizeStats(t testing.TB, path string) (marks, rows bolt.BucketStats) {
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer bdb.Close()
	require.NoError(t, bdb.View(func(tx *bolt.Tx) error {
		rows = tx.Bucket(append(layout.UserPrefix, "effects"...)).Stats()
		return layout.ForEachWindow(tx, false, func(_ int64, w *bolt.Bucket) error {
			marks.Add(w.Stats())
			return nil
		})
	}))
	return marks, rows
}
