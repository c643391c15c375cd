package oncekv_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// TestVersion2FileReadsAndUpgrades: a store whose marks are in the msgpack
// form of format 2 opens read-only as it is, writing nothing; its first
// writable open moves it to the current format (so a format 2 build
// refuses it from then on); its DONE, FAILED and claimed keys are answered
// as before, across the upgrade and a reopen; a payload other than the
// first is still key reuse; and the marks written after the upgrade are in
// the new form while the old ones stay readable.
func TestVersion2FileReadsAndUpgrades(t *testing.T) {
	ctx := context.Background()
	clock := oncetest.NewClock(epoch.Add(10 * time.Minute))
	path := filepath.Join(t.TempDir(), "x.db")
	opts := timeOpts(clock, time.Hour, 24*time.Hour)
	opts.KeepOrphanedClaims = true // the claim below is read back, not released
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	done := applyKey(t, db, "done")
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "failed", Payload: []byte("failed")},
		func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(errors.New("card declined")) })
	require.Error(t, err)
	claim, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "claimed", Payload: []byte("claimed")}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Equal(t, 3, rewriteAsVersion2(t, path))

	sum := func() []byte { b, err := os.ReadFile(path); require.NoError(t, err); return b }
	before := sum()
	ro := timeOpts(clock, 0, 24*time.Hour)
	ro.ReadOnly = true
	db, err = oncekv.Open(path, ro)
	require.NoError(t, err)
	require.Equal(t, done.Response, applyKey(t, db, "done").Response)
	require.NoError(t, db.Close())
	require.Equal(t, before, sum(), "a read-only open writes nothing")
	require.Equal(t, uint32(2), fileFormat(t, path).Version)

	check := func(db *oncekv.DB) {
		t.Helper()
		runs := 0
		res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "done", Payload: []byte("done")}, counted(&runs))
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, done.Response, res.Response)
		require.Equal(t, done.FirstSeen, res.FirstSeen)
		_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "done", Payload: []byte("other")}, counted(&runs))
		require.ErrorIs(t, err, oncekv.ErrKeyReuse)
		_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "failed", Payload: []byte("failed")}, counted(&runs))
		var failed *oncekv.FailedError
		require.ErrorAs(t, err, &failed)
		require.Equal(t, "card declined", failed.Message)
		require.Zero(t, runs)
	}
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	check(db)
	info, err := db.Mark("h", "claimed")
	require.NoError(t, err)
	require.Equal(t, oncekv.MarkInProgress, info.State)
	require.Equal(t, claim.Token(), info.Token)
	require.Equal(t, claim.LeaseUntil(), info.LeaseUntil)
	clock.Advance(2 * time.Minute) // the claim's lease ran out: taken over with a greater token
	again, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "claimed", Payload: []byte("claimed")}, time.Minute)
	require.NoError(t, err)
	require.Greater(t, again.Token(), claim.Token())
	_, err = again.Complete(ctx, []byte("sent"), nil)
	require.NoError(t, err)
	applyKey(t, db, "new")
	require.NoError(t, db.Close())
	require.Equal(t, uint32(layout.FormatVersion), fileFormat(t, path).Version, "upgraded by the writable open")
	require.Equal(t, map[string]bool{"done": true, "failed": true, "claimed": false, "new": false}, legacyMarks(t, path),
		"the marks written since are in the new form")

	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	check(db)
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "claimed", Payload: []byte("claimed")}, mustNotRunApply(t))
	require.NoError(t, err)
	require.Equal(t, "sent", string(res.Response))
	require.True(t, applyKey(t, db, "new").Duplicate)
	require.NoError(t, db.Close())
	oncetest.Check(t, path)
}

// rewriteAsVersion2 turns the closed store at path into one written by a
// format 2 build: every mark in msgpack, format record version 2. It
// returns how many marks it rewrote.
func rewriteAsVersion2(t *testing.T, path string) (n int) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		err := layout.ForEachWindow(tx, false, func(_ int64, w *bolt.Bucket) error {
			var keys [][]byte
			err := w.ForEach(func(k, _ []byte) error {
				keys = append(keys, bytes.Clone(k)) // bbolt's keys are not to be kept, nor written under a cursor
				return nil
			})
			for _, k := range keys {
				var m layout.Mark
				require.NoError(t, m.Unmarshal(w.Get(k)))
				if err := w.Put(k, m.MarshalLegacy()); err != nil {
					return err
				}
			}
			n += len(keys)
			return err
		})
		if err != nil {
			return err
		}
		var f layout.Format
		meta := tx.Bucket(layout.MetaRoot)
		require.NoError(t, f.Unmarshal(meta.Get([]byte("format"))))
		f.Version = 2
		return meta.Put([]byte("format"), f.Marshal())
	}))
	return n
}

// legacyMarks reports, for every mark of handler "h" in the closed store
// at path, whether it is still in the msgpack form of format 2.
func legacyMarks(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer b.Close()
	legacy := map[string]bool{}
	legacyForm := (&layout.Mark{State: layout.Done}).MarshalLegacy()[0]
	require.NoError(t, b.View(func(tx *bolt.Tx) error {
		return layout.ForEachWindow(tx, false, func(_ int64, w *bolt.Bucket) error {
			return w.ForEach(func(k, v []byte) error {
				_, key, ok := layout.SplitMarkKey(k)
				require.True(t, ok)
				legacy[key] = v[0] == legacyForm
				return nil
			})
		})
	}))
	return legacy
}
