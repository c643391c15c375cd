package oncekv_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// BenchmarkTombstoneBytes measures what a tombstone costs on disk: it
// applies ONCEKV_TOMB_KEYS keys (default 100,000; a 40-byte handler and
// key, a 32-byte response) into each of two windows, lets Retention pass
// so that both turn into tombstones, and reports, per key:
//
//   - tomb-B/key: the second window's tombstone pages and its persisted
//     Bloom filter, the whole cost of a window that holds only tombstones
//     in a store at a steady rate (its filter planned from the window
//     before it);
//   - first-tomb-B/key: the same for the first window, whose filter grew
//     from the smallest plan through five stages (more bits per key);
//   - mark-B/key: the windows' pages as DONE marks, before;
//   - file-B/key: the file's data (high water less free pages) after the
//     expiry, less an empty store's, over both windows.
//
// Run it once: go test -run '^$' -bench BenchmarkTombstoneBytes -benchtime=1x .
func BenchmarkTombstoneBytes(b *testing.B) {
	keys := 100_000
	if v, err := strconv.Atoi(os.Getenv("ONCEKV_TOMB_KEYS")); err == nil && v > 0 {
		keys = v
	}
	for b.Loop() {
		m := tombstoneBytes(b, keys)
		b.ReportMetric(m.tombs[1], "tomb-B/key")
		b.ReportMetric(m.tombs[0], "first-tomb-B/key")
		b.ReportMetric(m.marks, "mark-B/key")
		b.ReportMetric(m.file, "file-B/key")
	}
}

// tombFigures are BenchmarkTombstoneBytes's figures, bytes per key.
type tombFigures struct {
	tombs       [2]float64
	marks, file float64
}

func tombstoneBytes(b *testing.B, keys int) tombFigures {
	clock := oncetest.NewClock(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
	path := filepath.Join(b.TempDir(), "tombs.db")
	opts := &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1, Retention: 2 * time.Hour,
		WindowSpan: time.Hour, TombstoneRetention: 48 * time.Hour}
	db, err := oncekv.Open(path, opts)
	require.NoError(b, err)
	empty := dataBytes(db)
	ctx := context.Background()
	resp := bytes.Repeat([]byte{'r'}, 32)
	const batch = 1000
	for w := range 2 {
		for i := 0; i < keys; i += batch {
			reqs := make([]oncekv.Request, 0, batch)
			for j := i; j < min(i+batch, keys); j++ {
				reqs = append(reqs, oncekv.Request{Handler: "orders.charge", Key: fmt.Sprintf("3f6c1d52-5b1e-%d-%012d", w, j), Payload: resp})
			}
			_, err := db.ApplyBatch(ctx, reqs, func(*oncekv.Tx, int) ([]byte, error) { return resp, nil })
			require.NoError(b, err)
		}
		clock.Advance(time.Hour)
	}
	require.NoError(b, db.Close())
	marks, _ := tombPages(b, path)

	db, err = oncekv.Open(path, opts)
	require.NoError(b, err)
	clock.Advance(4 * time.Hour)
	st, err := db.Expire(ctx)
	require.NoError(b, err)
	require.EqualValues(b, 2*keys, st.Tombstones)
	fileBytes := dataBytes(db) - empty
	require.NoError(b, db.Close())
	_, tombs := tombPages(b, path)
	require.Len(b, tombs, 2)
	n := float64(keys)
	return tombFigures{tombs: [2]float64{float64(tombs[0]) / n, float64(tombs[1]) / n},
		marks: float64(marks) / (2 * n), file: float64(fileBytes) / (2 * n)}
}

// dataBytes is the part of the file holding data: its high water less its
// free pages, as of the last commit.
func dataBytes(db *oncekv.DB) int64 {
	f := db.Stats().File
	return f.HighWater - f.FreeBytes
}

// tombPages returns the bytes of the window buckets' pages, and of each
// tombstone window's pages with its persisted filter, oldest first.
func tombPages(b *testing.B, path string) (marks int, tombs []int) {
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(b, err)
	defer bdb.Close()
	require.NoError(b, bdb.View(func(tx *bolt.Tx) error {
		if err := layout.ForEachWindow(tx, false, func(_ int64, w *bolt.Bucket) error {
			s := w.Stats()
			marks += s.BranchAlloc + s.LeafAlloc
			return nil
		}); err != nil {
			return err
		}
		return layout.ForEachTombWindow(tx, func(start int64, t *bolt.Bucket) error {
			s := t.Stats()
			tombs = append(tombs, s.BranchAlloc+s.LeafAlloc+len(layout.GetFilter(tx, start)))
			return nil
		})
	}))
	return marks, tombs
}
