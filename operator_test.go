package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// The operator's API: DB.Marks, DB.Check, DB.ExpireDue, DB.LoadMarks (what
// cmd/oncekv is built on).

func applyOp(t *testing.T, db *oncekv.DB, handler, key, response string) {
	t.Helper()
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: handler, Key: key, Payload: []byte(key)},
		func(*oncekv.Tx) ([]byte, error) { return []byte(response), nil })
	require.NoError(t, err)
}

// advance moves the store's clock on by d in steps the store believes at
// once (under Options.MaxClockJump), as a running store's clock moves.
func advance(db *oncekv.DB, clock *oncetest.Clock, d time.Duration) {
	for ; d > 0; d -= 12 * time.Hour {
		clock.Advance(min(d, 12*time.Hour))
		db.Now()
	}
}

// listMarks returns "handler/key" of every mark filter selects, in order.
func listMarks(t *testing.T, db *oncekv.DB, filter oncekv.MarkFilter) []string {
	t.Helper()
	var got []string
	require.NoError(t, db.Marks(filter, func(m oncekv.MarkInfo) error {
		got = append(got, m.Handler+"/"+m.Key)
		return nil
	}))
	return got
}

func TestMarksFilter(t *testing.T) {
	db, clock := openClocked(t)
	applyOp(t, db, "pay", "a", "ok")
	applyOp(t, db, "payment", "a", "ok") // "pay" is a prefix of it: another handler all the same
	mustClaim(t, db, oncekv.Request{Handler: "pay", Key: "c"})
	clock.Advance(2 * time.Hour)
	applyOp(t, db, "pay", "d", "ok")
	windows := db.Stats().Windows
	require.Len(t, windows, 2)

	require.Equal(t, []string{"pay/a", "pay/c", "payment/a", "pay/d"}, listMarks(t, db, oncekv.MarkFilter{}))
	require.Equal(t, []string{"pay/a", "pay/c", "pay/d"}, listMarks(t, db, oncekv.MarkFilter{Handler: "pay"}))
	require.Empty(t, listMarks(t, db, oncekv.MarkFilter{Handler: "pa"}))
	require.Equal(t, []string{"pay/c"}, listMarks(t, db, oncekv.MarkFilter{State: oncekv.MarkInProgress}))
	require.Equal(t, []string{"pay/d"}, listMarks(t, db, oncekv.MarkFilter{Window: windows[1].Start}))
	require.Equal(t, []string{"pay/a"}, listMarks(t, db, oncekv.MarkFilter{Handler: "pay", State: oncekv.MarkDone, Window: windows[0].Start}))

	stop := errors.New("stop")
	calls := 0
	require.ErrorIs(t, db.Marks(oncekv.MarkFilter{}, func(oncekv.MarkInfo) error { calls++; return stop }), stop)
	require.Equal(t, 1, calls)
	require.ErrorIs(t, db.Marks(oncekv.MarkFilter{Handler: strings.Repeat("h", 1<<16)}, func(oncekv.MarkInfo) error { return nil }), oncekv.ErrKeyTooLarge)
}

// TestMarksUnderWrites lists while writers apply: each listing is one
// snapshot, so it sees every mark committed before it began, and no error.
func TestMarksUnderWrites(t *testing.T) {
	db, _ := openClocked(t)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				applyOp(t, db, "h", fmt.Sprint(w, "-", i), "ok")
			}
		})
	}
	for range 20 {
		before := db.Stats().LiveMarks
		require.GreaterOrEqual(t, uint64(len(listMarks(t, db, oncekv.MarkFilter{}))), before)
	}
	wg.Wait()
	require.Len(t, listMarks(t, db, oncekv.MarkFilter{}), 200)
}

func TestMarksClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.ErrorIs(t, db.Marks(oncekv.MarkFilter{}, func(oncekv.MarkInfo) error { return nil }), oncekv.ErrClosed)
	require.ErrorIs(t, db.Check(func(error) error { return nil }), oncekv.ErrClosed)
	_, err = db.ExpireDue()
	require.ErrorIs(t, err, oncekv.ErrClosed)
	_, err = db.LoadMarks(nil)
	require.ErrorIs(t, err, oncekv.ErrClosed)
}

// TestCheckNamesEveryDamagedRecord damages three system records of a
// closed store (a mark, a sealed window's filter, a fence counter) and
// expects Check, on the store opened read-only, to report each by bucket
// and key and to go on past each one.
func TestCheckNamesEveryDamagedRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "check.db")
	clock := oncetest.NewClock(claimEpoch)
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now})
	require.NoError(t, err)
	applyOp(t, db, "pay", "a", "ok")
	clock.Advance(time.Hour) // the first window is sealed: its filter is stored
	applyOp(t, db, "pay", "b", "ok")
	_, err = db.NextFence("printer")
	require.NoError(t, err)
	require.NoError(t, db.Check(func(p error) error { return fmt.Errorf("a sound store has a problem: %w", p) }))
	require.NoError(t, db.Close())

	flip := func(b *bolt.Bucket, key []byte) {
		v := append([]byte(nil), b.Get(key)...)
		require.NotEmpty(t, v, "%q", key)
		v[len(v)/2] ^= 0x10
		require.NoError(t, b.Put(key, v))
	}
	raw, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, raw.Update(func(tx *bolt.Tx) error {
		first := true
		require.NoError(t, tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			switch {
			case strings.HasPrefix(string(name), "oncekv.window/") && first:
				first = false
				flip(b, append([]byte{0, 3}, "paya"...))
			case string(name) == "oncekv.filters":
				k, _ := b.Cursor().First()
				flip(b, k)
			case string(name) == "oncekv.fences":
				flip(b, []byte("tprinter"))
			}
			return nil
		}))
		return nil
	}))
	require.NoError(t, raw.Close())

	ro, err := oncekv.Open(path, &oncekv.Options{ReadOnly: true, Now: clock.Now})
	require.NoError(t, err)
	defer ro.Close()
	var got []string
	require.NoError(t, ro.Check(func(p error) error {
		require.ErrorIs(t, p, oncekv.ErrCorrupt)
		var re *oncekv.RecordError
		require.ErrorAs(t, p, &re)
		got = append(got, re.Bucket+" "+re.Key)
		return nil
	}))
	window := "oncekv.window/" + claimEpoch.UTC().Truncate(time.Hour).Format(time.RFC3339)
	require.Equal(t, []string{
		window + " pay/a",
		"oncekv.filters " + claimEpoch.UTC().Truncate(time.Hour).Format(time.RFC3339),
		"oncekv.fences tprinter",
	}, got)
	stop := errors.New("stop")
	require.ErrorIs(t, ro.Check(func(error) error { return stop }), stop)
}

func TestExpireDueIsExpiresPlan(t *testing.T) {
	db, clock := openClocked(t)
	applyOp(t, db, "h", "old-1", "ok")
	applyOp(t, db, "h", "old-2", "ok")
	clock.Advance(2 * time.Hour)
	applyOp(t, db, "h", "new", "ok")
	due, err := db.ExpireDue()
	require.NoError(t, err)
	require.Empty(t, due)

	advance(db, clock, oncekv.DefaultRetention-time.Hour) // the first window's end is Retention ago
	due, err = db.ExpireDue()
	require.NoError(t, err)
	require.Len(t, due, 1)
	require.EqualValues(t, 2, due[0].Marks)
	require.Equal(t, db.Stats().Windows[0].Start, due[0].Start)
	_, err = db.Mark("h", "old-1")
	require.NoError(t, err, "a dry run dropped a mark")

	st, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.Equal(t, len(due), st.Windows)
	require.Equal(t, due[0].Marks, st.Marks)
	_, err = db.Mark("h", "old-1")
	require.ErrorIs(t, err, oncekv.ErrNotFound)
}

// TestExpireDueKeepsLiveClaim: a window with a live lease is not due, as
// Expire keeps it.
func TestExpireDueKeepsLiveClaim(t *testing.T) {
	db, clock := openClocked(t)
	_, err := db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, 30*24*time.Hour)
	require.NoError(t, err)
	advance(db, clock, oncekv.DefaultRetention+2*time.Hour)
	require.Equal(t, claimEpoch.Add(oncekv.DefaultRetention+2*time.Hour), db.Now())
	due, err := db.ExpireDue()
	require.NoError(t, err)
	require.Empty(t, due)
	st, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.Zero(t, st.Windows)
}

func TestLoadMarksRoundTrip(t *testing.T) {
	src, clock := openClocked(t)
	applyOp(t, src, "pay", "a", "ok")
	_, err := src.Apply(context.Background(), oncekv.Request{Handler: "pay", Key: "f"},
		func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(errors.New("declined")) })
	require.ErrorIs(t, err, oncekv.ErrFailed)
	clock.Advance(2 * time.Hour)
	applyOp(t, src, "pay", "b", "")
	var marks []oncekv.MarkInfo
	require.NoError(t, src.Marks(oncekv.MarkFilter{}, func(m oncekv.MarkInfo) error { marks = append(marks, m); return nil }))
	require.Len(t, marks, 3)

	path := filepath.Join(t.TempDir(), "moved.db")
	dst, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now})
	require.NoError(t, err)
	n, err := dst.LoadMarks(marks)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	var again []oncekv.MarkInfo
	require.NoError(t, dst.Marks(oncekv.MarkFilter{}, func(m oncekv.MarkInfo) error { again = append(again, m); return nil }))
	require.Equal(t, marks, again)

	// Loading a key twice is refused, and the whole batch writes nothing.
	n, err = dst.LoadMarks([]oncekv.MarkInfo{{Handler: "pay", Key: "new", State: oncekv.MarkDone, FirstSeen: clock.Now()}, marks[0]})
	require.ErrorIs(t, err, fs.ErrExist)
	require.Zero(t, n)
	_, err = dst.Mark("pay", "new")
	require.ErrorIs(t, err, oncekv.ErrNotFound)

	bad := []oncekv.MarkInfo{
		{Handler: "pay", Key: "c", State: oncekv.MarkInProgress, FirstSeen: clock.Now(), Token: 7},
		{Handler: "pay", Key: "c", State: 9, FirstSeen: clock.Now()},
		{Handler: "", Key: "c", State: oncekv.MarkDone, FirstSeen: clock.Now()},
	}
	for i, want := range []error{oncekv.ErrInProgress, oncekv.ErrInvalidMark, oncekv.ErrHandlerRequired} {
		_, err := dst.LoadMarks(bad[i : i+1])
		require.ErrorIs(t, err, want)
	}
	require.NoError(t, dst.Close())

	// After a reopen (filters from the file) the loaded keys are duplicates.
	dst, err = oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now})
	require.NoError(t, err)
	defer dst.Close()
	res, err := dst.Apply(context.Background(), oncekv.Request{Handler: "pay", Key: "a", Payload: []byte("a")}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "ok", string(res.Response))
	_, err = dst.Apply(context.Background(), oncekv.Request{Handler: "pay", Key: "f"}, nil)
	require.ErrorIs(t, err, oncekv.ErrFailed)

	// A mark past this store's retention is skipped, not revived.
	clock.Advance(oncekv.DefaultRetention - time.Hour)
	late, err := oncekv.Open(filepath.Join(t.TempDir(), "late.db"), &oncekv.Options{NoSync: true, Now: clock.Now})
	require.NoError(t, err)
	defer late.Close()
	n, err = late.LoadMarks(marks)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = late.Mark("pay", "a")
	require.ErrorIs(t, err, oncekv.ErrNotFound)

	ro, err := oncekv.Open(filepath.Join(t.TempDir(), "ro.db"), nil)
	require.NoError(t, err)
	roPath := ro.Path()
	require.NoError(t, ro.Close())
	ro, err = oncekv.Open(roPath, &oncekv.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	_, err = ro.LoadMarks(marks)
	require.ErrorIs(t, err, oncekv.ErrReadOnly)
}

// TestReadOnlyStatsSeeFreePages: a read-only open (the operator's stats)
// reports the free pages expiry left, as the writer saw them.
func TestReadOnlyStatsSeeFreePages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "free.db")
	clock := oncetest.NewClock(claimEpoch)
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	for i := range 2000 {
		applyOp(t, db, "h", fmt.Sprint(i), strings.Repeat("r", 100))
	}
	advance(db, clock, oncekv.DefaultRetention+2*time.Hour)
	_, err = db.Expire(context.Background())
	require.NoError(t, err)
	applyOp(t, db, "h", "last", "ok") // a commit after the expiry's, so its freed pages are free
	free := db.Stats().File.FreePages
	require.Positive(t, free)
	require.NoError(t, db.Close())

	ro, err := oncekv.Open(path, &oncekv.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	require.InDelta(t, free, ro.Stats().File.FreePages, 4) // Close's own commit may move a few
}
