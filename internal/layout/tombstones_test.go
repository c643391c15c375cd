package layout_test

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/envelope"
	"github.com/oncekv/oncekv/internal/layout"
)

func openBolt(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

const hour = int64(time.Hour)

// TestTombstonesRoundTrip writes a window's marks, turns them into
// tombstones in steps, and finds each one (state, first seen to the
// minute), deletes some, and finds nothing for other keys.
func TestTombstonesRoundTrip(t *testing.T) {
	db := openBolt(t)
	start := 1000 * hour
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { _, err := layout.Init(tx, 0, hour); return err }))
	const n = 1000
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for i := range n {
			m := layout.Mark{State: layout.Done, Response: []byte("r"), FirstSeen: start + int64(i)*int64(time.Minute) + 7}
			switch i % 10 {
			case 3:
				m.State, m.Response, m.Error = layout.Failed, nil, "declined"
			case 7:
				m.State, m.Response, m.LeaseUntil, m.Token = layout.InProgress, nil, 1, 9
			case 8:
				m.FirstSeen = start - 5*hour // moved in from an older window
			}
			if _, err := layout.PutMark(tx, start, layout.MarkKey("h", fmt.Sprintf("k%04d", i)), &m); err != nil {
				return err
			}
		}
		return nil
	}))
	tombs := 0
	for gone := false; !gone; {
		require.NoError(t, db.Update(func(tx *bolt.Tx) (err error) {
			var written int
			written, _, gone, err = layout.TombstoneSome(tx, start, 137, func(_ []byte, m *layout.Mark) (bool, error) {
				return m.State != layout.InProgress, nil
			})
			tombs += written
			return err
		}))
	}
	require.Equal(t, n-n/10, tombs)
	find := func(tx *bolt.Tx, key string) *layout.FoundMark {
		mkey := layout.MarkKey("h", key)
		h := layout.TombHash(mkey)
		m, err := layout.FindTomb(tx, start, mkey, &h)
		require.NoError(t, err)
		return m
	}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		require.Nil(t, tx.Bucket(layout.WindowName(start)), "the window's marks are gone")
		b := tx.Bucket(layout.TombName(start))
		require.EqualValues(t, tombs, layout.TombCount(b))
		for i := range n {
			m := find(tx, fmt.Sprintf("k%04d", i))
			if i%10 == 7 {
				require.Nil(t, m, "no tombstone for a claim without an outcome")
				continue
			}
			require.NotNil(t, m, i)
			require.True(t, m.Tombstone)
			want := layout.FoundMark{Mark: layout.Mark{State: layout.Done, FirstSeen: start + int64(i)*int64(time.Minute)}, Window: start, Tombstone: true}
			switch i % 10 {
			case 3:
				want.State = layout.Failed
			case 8:
				want.FirstSeen = start - 5*hour
			}
			require.Equal(t, want, *m, i)
		}
		for _, key := range []string{"", "a", "k", "k00001", "k9999", "zz"} {
			require.Nil(t, find(tx, key), key)
		}
		return nil
	}))
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for i := 0; i < n; i += 3 {
			mkey := layout.MarkKey("h", fmt.Sprintf("k%04d", i))
			h := layout.TombHash(mkey)
			deleted, err := layout.DeleteTomb(tx, start, mkey, &h)
			require.NoError(t, err)
			require.Equal(t, i%10 != 7, deleted, i)
		}
		return nil
	}))
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		left := 0
		for i := range n {
			m := find(tx, fmt.Sprintf("k%04d", i))
			require.Equal(t, i%3 != 0 && i%10 != 7, m != nil, i)
			if m != nil {
				left++
			}
		}
		require.EqualValues(t, left, layout.TombCount(tx.Bucket(layout.TombName(start))))
		return nil
	}))
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return layout.DropTombs(tx, start) }))
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		require.Nil(t, tx.Bucket(layout.TombName(start)))
		return nil
	}))
}

// TestTombstoneBytes pins what a tombstone costs in its bucket's pages on
// 4 KiB pages: under 21 bytes each, against about 6 times that for the
// DONE mark it replaces.
func TestTombstoneBytes(t *testing.T) {
	db := openBolt(t)
	start := 5 * hour
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { _, err := layout.Init(tx, 0, hour); return err }))
	const n = 20000
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for i := range n {
			m := layout.Mark{State: layout.Done, Response: bytes.Repeat([]byte{'r'}, 32), FirstSeen: start}
			if _, err := layout.PutMark(tx, start, layout.MarkKey("orders.charge", fmt.Sprintf("3f6c1d52-5b1e-4a43-9d55-%012d", i)), &m); err != nil {
				return err
			}
		}
		return nil
	}))
	var markBytes int
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		markBytes = pageBytes(tx.Bucket(layout.WindowName(start)).Stats())
		return nil
	}))
	for gone := false; !gone; {
		require.NoError(t, db.Update(func(tx *bolt.Tx) (err error) {
			_, _, gone, err = layout.TombstoneSome(tx, start, 10000, func([]byte, *layout.Mark) (bool, error) { return true, nil })
			return err
		}))
	}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		per := float64(pageBytes(tx.Bucket(layout.TombName(start)).Stats())) / n
		t.Logf("%.2f bytes per tombstone, %.2f per DONE mark", per, float64(markBytes)/n)
		require.Less(t, per, 21.0)
		return nil
	}))
}

func pageBytes(s bolt.BucketStats) int { return s.BranchAlloc + s.LeafAlloc }

func TestTombNamesSortInTimeOrder(t *testing.T) {
	starts := []int64{math.MinInt64, -1, 0, 1, math.MaxInt64}
	for i, s := range starts {
		got, ok := layout.ParseTombName(layout.TombName(s))
		require.True(t, ok)
		require.Equal(t, s, got)
		if i > 0 {
			require.Negative(t, bytes.Compare(layout.TombName(starts[i-1]), layout.TombName(s)))
		}
	}
	_, ok := layout.ParseTombName(layout.WindowName(0))
	require.False(t, ok)
}

// FuzzTombChunk: the chunk decoder never panics, and accepts only a whole
// number of entries in a sealed record.
func FuzzTombChunk(f *testing.F) {
	good := envelope.Alloc(1, 2*layout.TombEntrySize)
	envelope.Finish(good)
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, err := layout.TombChunkEntries(raw)
		if err != nil {
			return
		}
		require.Positive(t, n)
		require.Equal(t, 1+n*layout.TombEntrySize+4, len(raw))
	})
}

// FuzzParkedEntry and FuzzGhost: the decoders of the parked keys' index
// and of the ghost filters never panic, and what they accept encodes back
// to the same bytes.
func FuzzParkedEntry(f *testing.F) {
	f.Add(layout.ParkedEntry{Window: 3, At: -1}.Marshal())
	f.Add(layout.Expiry{Floor: 3}.Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var p layout.ParkedEntry
		if p.Unmarshal(raw) != nil {
			return
		}
		require.Equal(t, raw, p.Marshal())
	})
}

func FuzzGhost(f *testing.F) {
	f.Add(layout.Ghost{Since: 7, Filter: []byte("OKBF")}.Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var g layout.Ghost
		if g.Unmarshal(raw) != nil {
			return
		}
		require.Equal(t, raw, g.Marshal())
	})
}

// FuzzAdvisor: the window advisor's record decoder never panics, never
// allocates for more handlers than the record holds, and what it accepts
// encodes back to the same bytes.
func FuzzAdvisor(f *testing.F) {
	a := layout.Advisor{SavedAt: 1, Retention: 2, TombstoneRetention: 3,
		Handlers: []layout.AdvisorHandler{{Name: "a", Count: 3, Sum: 9, Max: 5, Buckets: [layout.AgeBuckets]uint64{1, 2, 3}}},
		Other:    layout.AdvisorHandler{LateDuplicates: 1}}
	for i := 3; i < layout.AgeBuckets; i++ {
		a.Handlers[0].Buckets[i] = 3
	}
	f.Add(a.Marshal())
	f.Add((&layout.Advisor{}).Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var got layout.Advisor
		if got.Unmarshal(raw) != nil {
			return
		}
		require.Equal(t, raw, got.Marshal())
	})
}
