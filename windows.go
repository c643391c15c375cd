package oncekv

import (
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// loadWindows builds the in-memory list of live windows at Open. No step
// reads the marks themselves: a window's mark count is its bucket's
// sequence, and its filter comes from the file when the file can vouch for
// it. A sealed window's filter was persisted when the window was sealed; the
// newest window's, by the last clean Close (see loadNewestFilter). Only a
// filter that is missing, damaged or stale is rebuilt by reading every key
// of its window: slower, never wrong.
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

// placeMark returns the window a new mark goes into at now. It runs in a
// write transaction, and goes no earlier than a window that transaction
// opened: opening it sealed the window before, whose filter is persisted
// as it stands (see sealLocked), so a key that went there after would be
// missing from it at the next Open. (LoadMarks places each mark at its own
// time, in any order.)
func (db *DB) placeMark(now time.Time) int64 {
	start := db.live.Place(db.windowConfig, now.UnixNano())
	if w := db.current; w != nil {
		for opened := range w.opened {
			start = max(start, opened)
		}
	}
	return start
}

// learnLocked publishes what a committed transaction wrote: new windows,
// mark counts, and every new key in its window's filter. It runs under
// writeMu, after the commit and before the next writer.
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
					// Options were validated, so this cannot happen; without
					// a filter the window is simply always read.
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

// rewriteMark writes m, the new state of the key mkey whose mark was found
// in window from, and returns the window it went into.
//
// A mark must outlive what it promises: an IN_PROGRESS mark its lease, and
// a DONE or FAILED mark written now Retention from now (a claim that
// completes late is deduplicated for Retention after it completed). When
// from expires before that, the mark moves to the window a new mark would
// go into now, which expires later than now+Retention: the newest window
// or a newer one, never a sealed one, so that sealed windows still never
// gain a key (see findMarkFrom). Its FirstSeen stays. The old window's
// filter keeps the key: a false positive, never a false negative; the new
// window's filter learns it after the commit.
//
// An IN_PROGRESS mark whose lease ends later than any before it in its
// window also records that end (layout.PutLeaseEnd), and expiry keeps the
// window until then: a lease longer than Retention still keeps its mark.
func (w *writeTx) rewriteMark(from int64, mkey []byte, m *layout.Mark) (int64, error) {
	db := w.db
	until := w.now.UnixNano() + int64(db.opts.Retention)
	if m.State == layout.InProgress {
		until = m.LeaseUntil
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

// putMarkLeased is putMark for a mark that may hold a lease: see
// rewriteMark.
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

// latestLeaseEnd is the latest lease end recorded for window, this transaction's
// included.
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

// unlearnLocked takes the marks a committed transaction deleted off their
// windows' counts. It runs under writeMu, like learnLocked, so a count
// always equals the marks its window holds in the last commit: each
// decrement is for a mark that existed and was counted, and no count can go
// below zero. (A window expired meanwhile is no longer in the set, and
// nobody counts its marks any more.)
func (db *DB) unlearnLocked(windows []int64) {
	for _, start := range windows {
		if w := db.live.Find(start); w != nil {
			w.Marks.Add(-1) // the filter keeps the key: a false positive, never a false negative
		}
	}
}
