package oncekv

import (
	"context"
	"fmt"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// Tombstones: with Options.TombstoneRetention, a window past Retention is
// not dropped but turned into tombstones, one per final mark, each saying
// that its key was applied (or failed) and about when, in about 20.5 bytes
// (internal/layout/tombstones.go), until TombstoneRetention. A duplicate
// that meets one is still suppressed, with Result.ResponseExpired. The
// tombstone windows keep the live window's Bloom filter, so an unseen key
// costs them a filter probe each, and every look-up reads them after the
// live windows (docs/design/tombstones.md).

// tombsOn reports whether windows leave tombstones.
func (db *DB) tombsOn() bool { return db.opts.TombstoneRetention > 0 }

// loadTombs builds the tombstone windows at Open from their buckets: a
// window's count is its bucket's sequence, its filter the window's
// persisted one. A tombstone window whose filter is missing or damaged has
// none (its keys are hashed away: no rebuild), and every look-up reads it.
func (db *DB) loadTombs(tx *bolt.Tx) error {
	var tombs []*windowset.Live
	err := layout.ForEachTombWindow(tx, func(start int64, b *bolt.Bucket) error {
		w := &windowset.Live{Start: start}
		w.Marks.Store(int64(layout.TombCount(b)))
		if db.filtersOn() {
			if w.Filter = db.decodeFilter(tx, start); w.Filter == nil {
				db.log.Warn("a tombstone window has no Bloom filter: every look-up of an unseen key reads it until it expires",
					"window", time.Unix(0, start).UTC())
			}
		}
		tombs = append(tombs, w)
		return nil
	})
	db.tombs = windowset.NewSet(tombs, math.MinInt64)
	return err
}

// lookInTombs is the end of every look-up: the tombstone windows, newest
// first, skipping those whose filter rules the key out.
func (db *DB) lookInTombs(btx *bolt.Tx, mkey []byte, h uint64) (*layout.FoundMark, error) {
	tombs := db.tombs.Windows()
	var th *[layout.TombHashSize]byte
	for i := len(tombs) - 1; i >= 0; i-- {
		t := tombs[i]
		if t.Filter != nil && !db.filterMayContain(t.Filter, h) {
			db.countLookup(btx, true)
			continue
		}
		if th == nil {
			sum := layout.TombHash(mkey)
			th = &sum
		}
		m, err := layout.FindTomb(btx, t.Start, mkey, th)
		if m != nil || err != nil {
			return m, err
		}
		if t.Filter != nil {
			db.countLookup(btx, false)
		}
	}
	return nil, nil
}

// mayHaveTomb reports whether a tombstone window might hold the key hashed
// h: false means certainly not, as of the last commit.
func (db *DB) mayHaveTomb(h uint64) bool {
	for _, t := range db.tombs.Windows() {
		if t.Filter == nil || db.filterMayContain(t.Filter, h) {
			return true
		}
	}
	return false
}

// tombstoneWindow turns the live window w, past Retention, into
// tombstones in steps of Options.ExpireStep marks, each its own
// transaction, then raises the expiry floor past it. The window answers
// throughout: from its marks until they are turned, from its tombstones
// after, with the same filter. An interrupted call leaves the window live
// and part turned, and the next one goes on from its first mark left.
func (db *DB) tombstoneWindow(ctx context.Context, st *ExpireStats, w *windowset.Live) error {
	start := w.Start
	for gone := false; !gone; {
		if err := ctx.Err(); err != nil {
			return err
		}
		var tombs, deleted int
		err := db.expireTx(st, func(wt *writeTx) (err error) {
			if err := db.keepFilterFor(wt.btx, w); err != nil {
				return err
			}
			tombs, deleted, gone, err = layout.TombstoneSome(wt.btx, start, db.opts.ExpireStep, func(mkey []byte, m *layout.Mark) (bool, error) {
				db.ghostAdd(bloom.Sum64(mkey))
				switch m.State {
				case layout.Done, layout.Failed:
					return true, nil
				case layout.Parked:
					// Carried on before, by the index: one missing from it is
					// not dropped silently.
					return false, &RecordError{Bucket: windowName(start), Key: fmt.Sprintf("%x", mkey),
						Err: fmt.Errorf("%w: a PARKED mark the parked keys' index does not name", ErrCorrupt)}
				}
				return false, nil // a claim that recorded no outcome: nothing to keep
			})
			return err
		}, func() {
			t := db.tombs.Find(start)
			if t == nil && tombs > 0 {
				t = &windowset.Live{Start: start, Filter: w.Filter}
				db.tombs.Add(t)
			}
			if t != nil {
				t.Marks.Add(int64(tombs))
			}
			w.Marks.Add(-int64(deleted))
		})
		if err != nil {
			return err
		}
		st.Marks += uint64(deleted)
		st.Tombstones += uint64(tombs)
		db.stats.expiredMarks.Add(uint64(deleted))
	}
	st.Windows++
	db.stats.expiredWindows.Add(1)
	return db.raiseFloor(st, db.windowConfig.End(start), nil)
}

// keepFilterFor persists w's filter for its tombstones, unless the file
// has it: Open rebuilt it (the persisted one missing or damaged), and the
// store was not closed since.
func (db *DB) keepFilterFor(btx *bolt.Tx, w *windowset.Live) error {
	if w.Filter == nil {
		return nil
	}
	rebuilt := false
	for _, s := range db.opened.rebuiltSealed {
		rebuilt = rebuilt || s == w.Start
	}
	if !rebuilt && layout.GetFilter(btx, w.Start) != nil {
		return nil
	}
	enc, err := w.Filter.MarshalBinary()
	if err != nil {
		return err
	}
	return layout.PutFilter(btx, w.Start, enc)
}

// expireTombs drops the tombstone windows past TombstoneRetention at now
// (all those of windows already gone, once TombstoneRetention is 0), oldest
// first, each in one transaction.
func (db *DB) expireTombs(st *ExpireStats, now int64) error {
	for _, t := range db.tombs.Windows() {
		end := db.windowConfig.End(t.Start)
		if t.Start >= db.live.Floor() || (db.tombsOn() && now < end+int64(db.opts.TombstoneRetention)) {
			return nil // still live (being turned), or still kept
		}
		err := db.expireTx(st, func(w *writeTx) error { return layout.DropTombs(w.btx, t.Start) },
			func() { db.tombs.DropBelow(end) })
		if err != nil {
			return err
		}
		st.TombstoneWindows++
		st.TombstonesDropped += uint64(max(t.Marks.Load(), 0))
	}
	return nil
}

// deleteTomb deletes the tombstone of mkey in window, for Forget, and
// reports whether there was one; the window's count follows once the
// caller's commit is done (tombForgotten).
func (w *writeTx) deleteTomb(window int64, mkey []byte) (bool, error) {
	h := layout.TombHash(mkey)
	deleted, err := layout.DeleteTomb(w.btx, window, mkey, &h)
	if err == nil && deleted {
		w.pin(bloom.Sum64(mkey))
	}
	return deleted, err
}

// tombForgotten takes a committed Forget's tombstone off its window's
// count.
func (db *DB) tombForgotten(window int64) {
	if t := db.tombs.Find(window); t != nil {
		t.Marks.Add(-1) // the filter keeps the key: a false positive, never a false negative
	}
}

// tombStats describes the tombstone windows, oldest first, and counts
// their tombstones.
func (db *DB) tombStats() (windows []WindowStats, tombs uint64) {
	for _, t := range db.tombs.Windows() {
		ws := WindowStats{Start: time.Unix(0, t.Start), End: time.Unix(0, db.windowConfig.End(t.Start)), Marks: uint64(max(t.Marks.Load(), 0))}
		if t.Filter != nil {
			ws.FilterBytes = t.Filter.SizeBytes()
		}
		tombs += ws.Marks
		windows = append(windows, ws)
	}
	return windows, tombs
}
