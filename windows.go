package oncekv

import (
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// loadWindows builds the live windows at Open without reading any mark: a
// window's count is its bucket's sequence, and its filter is loaded when
// the file vouches for it, else rebuilt (docs/design/windows-and-filters.md).
func (db *DB) loadWindows(tx *bolt.Tx) error {
	exp, err := layout.ReadExpiry(tx)
	if err != nil {
		return err
	}
	db.clock.atLeast(exp.ClockHigh)
	db.clockSaved = exp.ClockHigh
	var live []*windowset.Live
	var buckets []*bolt.Bucket
	err = layout.ForEachWindow(tx, false, func(start int64, b *bolt.Bucket) error {
		if start < exp.Floor {
			return nil // expired; Expire finishes deleting it
		}
		w := &windowset.Live{Start: start}
		w.Marks.Store(int64(layout.WindowMarks(b)))
		live = append(live, w)
		buckets = append(buckets, b)
		return nil
	})
	if err != nil {
		return err
	}
	err = layout.ForEachLeaseEnd(tx, func(start, end int64) error {
		for _, w := range live {
			if w.Start == start {
				w.LeaseEnd.Store(end)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	newest := int64(math.MinInt64) // no live window: any stamp is stale
	if len(live) > 0 {
		newest = live[len(live)-1].Start
	}
	saved, state, stampErr := layout.NewestFilter(tx, newest)
	db.opened.staleStamp = state == layout.FilterStale
	if db.filtersOn() {
		for i, w := range live {
			if i == len(live)-1 {
				w.Filter = db.loadNewestFilter(tx.ID(), w.Start, saved, state, stampErr)
			} else if w.Filter = db.decodeFilter(tx, w.Start); w.Filter == nil {
				db.opened.rebuiltSealed = append(db.opened.rebuiltSealed, w.Start)
			}
			if w.Filter != nil {
				continue
			}
			db.opened.rebuilt++
			if w.Filter, err = db.rebuildFilter(buckets[i], uint64(w.Marks.Load())); err != nil {
				return err
			}
		}
	}
	db.live = windowset.NewSet(live, exp.Floor)
	return nil
}

// placeMark returns the window a new mark goes into at now, in a write
// transaction: never before a window this transaction opened, whose
// predecessor it sealed.
func (db *DB) placeMark(now time.Time) int64 {
	start := db.live.Place(db.windowConfig, now.UnixNano())
	if w := db.current; w != nil {
		for opened := range w.opened {
			start = max(start, opened)
		}
	}
	return start
}

// learnLocked publishes what a committed transaction wrote (new windows,
// mark counts, lease ends, new keys in the filters), under writeMu.
func (db *DB) learnLocked(marked []markedKey) {
	for _, m := range marked {
		w := db.live.Find(m.window)
		if w == nil {
			w = &windowset.Live{Start: m.window}
			if db.filtersOn() {
				var plan uint64
				if n := db.live.Newest(); n != nil {
					plan = uint64(n.Marks.Load())
				}
				f, err := db.newFilter(plan)
				if err != nil {
					// Cannot happen with validated Options; without a filter the
					// window is always read.
					db.log.Error("no Bloom filter for a new window", "err", err)
				}
				w.Filter = f
			}
			db.live.Add(w)
		}
		if m.removed {
			w.Marks.Add(-1) // the filter keeps the key: a false positive, never a false negative
			continue
		}
		if m.leaseUntil > w.LeaseEnd.Load() {
			w.LeaseEnd.Store(m.leaseUntil)
		}
		if !m.fresh {
			continue
		}
		w.Marks.Add(1)
		if w.Filter != nil {
			w.Filter.Add(m.hash)
		}
	}
}

// rewriteMark writes m, the new state of mkey's mark found in window from,
// and returns the window it went into. A mark must outlive its lease, or
// Retention from now for a final one: when from expires before that, the
// mark moves to where a new mark would go now, never to a sealed window
// (docs/design/windows-and-filters.md). Its FirstSeen stays.
func (w *writeTx) rewriteMark(from int64, mkey []byte, m *layout.Mark) (int64, error) {
	db := w.db
	until := w.now.UnixNano() + int64(db.opts.Retention)
	switch m.State {
	case layout.InProgress:
		until = m.LeaseUntil
	case layout.Parked:
		until = math.MaxInt64 // until resolved: it moves to the newest window
	}
	to := from
	if db.windowConfig.ExpiresAt(from) < until {
		if to = db.placeMark(w.now); to != from {
			if _, err := layout.DeleteMark(w.btx, from, mkey); err != nil {
				return 0, err
			}
			w.pin(bloom.Sum64(mkey))
			w.marked = append(w.marked, markedKey{window: from, mkey: mkey, removed: true})
		}
	}
	return to, w.putMarkLeased(to, mkey, m)
}

// putMarkLeased is putMark that also records the window's lease end when
// m's lease ends later than any before it, so that expiry keeps the window.
func (w *writeTx) putMarkLeased(window int64, mkey []byte, m *layout.Mark) error {
	if err := w.putMark(window, mkey, m); err != nil {
		return err
	}
	if m.State != layout.InProgress || m.LeaseUntil <= w.latestLeaseEnd(window) {
		return nil
	}
	w.marked[len(w.marked)-1].leaseUntil = m.LeaseUntil
	return layout.PutLeaseEnd(w.btx, window, m.LeaseUntil)
}

// latestLeaseEnd is the latest lease end recorded for window, this
// transaction's included.
func (w *writeTx) latestLeaseEnd(window int64) int64 {
	end := int64(math.MinInt64)
	if l := w.db.live.Find(window); l != nil {
		end = l.LeaseEnd.Load()
	}
	for _, m := range w.marked {
		if m.window == window {
			end = max(end, m.leaseUntil)
		}
	}
	return end
}

// unlearnLocked takes a committed transaction's deleted marks off their
// windows' counts, under writeMu, so a count never goes below zero.
func (db *DB) unlearnLocked(windows []int64) {
	for _, start := range windows {
		if w := db.live.Find(start); w != nil {
			w.Marks.Add(-1) // the filter keeps the key: a false positive, never a false negative
		}
	}
}
