package oncekv_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// TestAppendedKeysPackPages: keys that only grow (offsets, ULIDs) leave the
// pages of their window bucket, and of the user bucket their effects write
// to, packed full, where bbolt's default would leave them half empty;
// random keys, and a transaction that writes one key between others
// first and appends after it, keep bbolt's default, which leaves the room
// inserts need.
func TestAppendedKeysPackPages(t *testing.T) {
	const n = 5000
	straggling := batchesOf(n, false)
	for i := 1; i < len(straggling); i++ {
		// Each batch starts with a key that sorts between the previous
		// batch's last two, then appends.
		straggling[i] = append([]string{straggling[i-1][len(straggling[i-1])-2] + "a"}, straggling[i]...)
	}
	packed := func(s bolt.BucketStats) float64 { return float64(s.LeafInuse) / float64(s.LeafAlloc) }
	for _, tc := range []struct {
		name    string
		batches [][]string
		full    bool
	}{
		{"ascending", batchesOf(n, false), true},
		{"random", batchesOf(n, true), false},
		{"one-insert-then-appends", straggling, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			loadSizeKeys(t, path, tc.batches)
			marks, rows := sizeStats(t, path)
			require.Equal(t, len(slices.Concat(tc.batches...)), marks.KeyN)
			for name, st := range map[string]bolt.BucketStats{"marks": marks, "effect rows": rows} {
				if tc.full {
					require.Greater(t, packed(st), 0.9, "%s: %d of %d leaf bytes in use", name, st.LeafInuse, st.LeafAlloc)
				} else {
					require.Less(t, packed(st), 0.8, "%s: %d of %d leaf bytes in use", name, st.LeafInuse, st.LeafAlloc)
				}
			}
		})
	}
}
