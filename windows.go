package oncekv

import (
	"fmt"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windows"
)

// minFilterKeys is the smallest number of keys a window's filter is planned
// for. The filter grows past its plan, so a small guess is cheap.
const minFilterKeys = 4096

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
	var live []*windows.Live
	var buckets []*bolt.Bucket
	err = layout.ForEachWindow(tx, false, func(start int64, b *bolt.Bucket) error {
		if start < exp.Floor {
			return nil // expired; Expire finishes deleting it
		}
		w := &windows.Live{Start: start}
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
	db.windows = windows.NewSet(live, exp.Floor)
	return nil
}

func (db *DB) filtersOn() bool { return db.opts.BloomFalsePositiveRate > 0 }

// newFilter returns an empty filter planned for about keys keys.
func (db *DB) newFilter(keys uint64) (*bloom.Filter, error) {
	return bloom.New(max(keys, minFilterKeys), db.opts.BloomFalsePositiveRate)
}

// decodeFilter returns the persisted filter of the sealed window starting
// at start, or nil when there is none or it does not decode.
func (db *DB) decodeFilter(tx *bolt.Tx, start int64) *bloom.Filter {
	raw := layout.GetFilter(tx, start)
	if raw == nil {
		return nil
	}
	return db.decodeOrWarn(raw, start)
}

// decodeOrWarn decodes a persisted filter of the window starting at start,
// or logs why it cannot and returns nil, for the caller to rebuild it.
func (db *DB) decodeOrWarn(raw []byte, start int64) *bloom.Filter {
	f, err := bloom.Decode(raw)
	if err != nil {
		db.log.Warn("rebuilding a window's Bloom filter", "window", time.Unix(0, start).UTC(), "err", err)
		return nil
	}
	return f
}

// loadNewestFilter returns the filter the last clean Close persisted for
// the newest window, the one starting at start, when the file proves it
// current (see layout.FilterStamp), or nil. A filter that lacked a
// committed key would turn a duplicate into a second run of its effect, so
// anything short of proof means a rebuild: after a crash, the process that
// died may have written marks the filter never learnt.
//
// raw, state and err are what layout.NewestFilter found in the
// transaction txid, Open's first look at the windows, before Open wrote
// anything itself: a write of Open's own (a legacy file's upgrade) moves
// the file past the stamp, and costs one rebuild.
func (db *DB) loadNewestFilter(txid int, start int64, raw []byte, state layout.NewestFilterState, err error) *bloom.Filter {
	switch state {
	case layout.FilterCurrent:
		if f := db.decodeOrWarn(raw, start); f != nil {
			db.opened.provenTx = txid
			return f
		}
	case layout.FilterStale:
		db.log.Info("rebuilding the newest window's Bloom filter: the store was written after its last clean Close",
			"path", db.path, "window", time.Unix(0, start).UTC())
	case layout.FilterDamaged:
		db.log.Warn("rebuilding a window's Bloom filter", "window", time.Unix(0, start).UTC(), "err", err)
	case layout.FilterMissing:
		db.log.Debug("rebuilding the newest window's Bloom filter: none was persisted", "path", db.path)
	}
	return nil
}

func (db *DB) rebuildFilter(b *bolt.Bucket, marks uint64) (*bloom.Filter, error) {
	f, err := db.newFilter(marks + marks/4)
	if err != nil {
		return nil, err
	}
	err = b.ForEach(func(mkey, _ []byte) error {
		f.Add(bloom.Sum64(mkey))
		return nil
	})
	return f, err
}

// findMark is the one look-up of a key's mark that every path uses. It looks
// in the live windows newest first, and skips a window whose filter says the
// key is definitely not there. A positive answer is always confirmed by the
// exact look-up, so a false positive costs one B-tree read and never drops a
// request.
//
// The filters know every committed mark: a write transaction teaches them
// its marks after it commits and before the next writer starts. What they
// cannot know is a mark written earlier in the same, still open,
// transaction (an earlier request of the same group or batch), so for a key
// written in the current transaction the look-up reads every window.
func (db *DB) findMark(btx *bolt.Tx, mkey []byte) (*layout.FoundMark, error) {
	return db.findMarkFrom(btx, mkey, bloom.Sum64(mkey), math.MinInt64)
}

// findMarkFrom is findMark for a request that has already looked, in an
// earlier snapshot, in every window starting before from, and found nothing.
// Those windows were sealed then: a new mark only ever goes into the newest
// window, and a mark that moves (see rewriteMark) into the newest or a newer
// one, so a sealed window never gains a key, and what a snapshot did not
// find there is not there now. The write path of such a request looks only
// in the window or two that can still change, so its cost does not grow
// with the number of live windows. h is bloom.Sum64(mkey), which the
// request hashed once.
func (db *DB) findMarkFrom(btx *bolt.Tx, mkey []byte, h uint64, from int64) (*layout.FoundMark, error) {
	if btx.Writable() && db.current != nil && db.current.wroteHash(h) {
		m, err := layout.FindMark(btx, mkey, db.windows.Floor())
		return db.releaseOrphan(m), err
	}
	return db.lookIn(btx, db.windows.Windows(), mkey, h, from)
}

// lookIn is findMarkFrom in the windows of live (as db.windows listed them
// at some point) only, for a read transaction, or for a write transaction
// whose own marks do not include the key's.
func (db *DB) lookIn(btx *bolt.Tx, live []*windows.Live, mkey []byte, h uint64, from int64) (*layout.FoundMark, error) {
	for i := len(live) - 1; i >= 0 && live[i].Start >= from; i-- {
		w := live[i]
		if w.Filter != nil && !db.filterMayContain(w.Filter, h) {
			db.countLookup(btx, true)
			continue
		}
		b := btx.Bucket(layout.WindowName(w.Start))
		if b == nil {
			continue // created after this snapshot, or being expired
		}
		m, err := layout.GetMark(b, w.Start, mkey)
		if m != nil || err != nil {
			return db.releaseOrphan(m), err
		}
		if w.Filter != nil {
			db.countLookup(btx, false)
		}
	}
	return nil, nil
}

// mayHaveMark reports whether any of the live windows might hold the key
// hashed h (bloom.Sum64 of its mark key): false means the key was certainly
// never seen (as of the last commit), and the read transaction of the
// duplicate fast path can be skipped altogether.
func (db *DB) mayHaveMark(live []*windows.Live, h uint64) bool {
	for _, w := range live {
		if w.Filter == nil || db.filterMayContain(w.Filter, h) {
			return true
		}
	}
	return false
}

// filterMayContain asks f about h, through filterHook when a test has set
// one to play the adversary.
func (db *DB) filterMayContain(f *bloom.Filter, h uint64) bool {
	maybe := f.MayContain(h)
	if db.filterHook != nil {
		return db.filterHook(maybe)
	}
	return maybe
}

// placeMark returns the window a new mark goes into at now. It runs in a
// write transaction, and goes no earlier than a window that transaction
// opened: opening it sealed the window before, whose filter is persisted
// as it stands (see sealLocked), so a key that went there after would be
// missing from it at the next Open. (LoadMarks places each mark at its own
// time, in any order.)
func (db *DB) placeMark(now time.Time) int64 {
	start := db.windows.Place(db.window, now.UnixNano())
	if w := db.current; w != nil {
		for opened := range w.opened {
			start = max(start, opened)
		}
	}
	return start
}

// sealLocked persists the filter of the newest window before a newer window
// receives its first mark, in the same transaction. From then on the sealed
// window only receives rewrites of marks it already holds, so the stored
// filter stays complete, and Open can load it instead of reading every key.
//
// The in-memory filter learns a transaction's marks only once it has
// committed, so the stored one also gets the new marks this transaction
// (db.current, which runs it) wrote into the window before sealing it: a
// LoadMarks of marks of both windows.
func (db *DB) sealLocked(btx *bolt.Tx, newStart int64) error {
	newest := db.windows.Newest()
	if newest == nil || newest.Start >= newStart || newest.Filter == nil {
		return nil
	}
	enc, err := newest.Filter.MarshalBinary()
	if err == nil {
		enc, err = db.withMarksOfCurrent(enc, newest.Start)
	}
	if err != nil {
		return fmt.Errorf("oncekv: encode window filter: %w", err)
	}
	return layout.PutFilter(btx, newest.Start, enc)
}

// withMarksOfCurrent returns enc, an encoded filter of the window starting
// at start, with the keys of the new marks the current transaction wrote
// into that window added. The in-memory filter is left alone: readers use
// it, and this transaction may still roll back.
func (db *DB) withMarksOfCurrent(enc []byte, start int64) ([]byte, error) {
	w := db.current
	if w == nil {
		return enc, nil
	}
	var f *bloom.Filter
	for _, m := range w.marked {
		if m.window != start || !m.fresh || m.removed {
			continue
		}
		if f == nil {
			var err error
			if f, err = bloom.Decode(enc); err != nil {
				return nil, err
			}
		}
		f.Add(m.hash)
	}
	if f == nil {
		return enc, nil
	}
	return f.MarshalBinary()
}

// learnLocked publishes what a committed transaction wrote: new windows,
// mark counts, and every new key in its window's filter. It runs under
// writeMu, after the commit and before the next writer.
func (db *DB) learnLocked(marked []markedKey) {
	for _, m := range marked {
		w := db.windows.Find(m.window)
		if w == nil {
			w = &windows.Live{Start: m.window}
			if db.filtersOn() {
				var plan uint64
				if n := db.windows.Newest(); n != nil {
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
			db.windows.Add(w)
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
	if db.window.ExpiresAt(from) < until {
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
	if m.State != layout.InProgress || m.LeaseUntil <= w.leaseEnd(window) {
		return nil
	}
	w.marked[len(w.marked)-1].leaseUntil = m.LeaseUntil
	return layout.PutLeaseEnd(w.btx, window, m.LeaseUntil)
}

// leaseEnd is the latest lease end recorded for window, this transaction's
// included.
func (w *writeTx) leaseEnd(window int64) int64 {
	end := int64(math.MinInt64)
	if l := w.db.windows.Find(window); l != nil {
		end = l.LeaseEnd.Load()
	}
	for _, m := range w.marked {
		if m.window == window {
			end = max(end, m.leaseUntil)
		}
	}
	return end
}

// saveClockLocked piggy-backs the store's clock on w, a write transaction
// about to run, when it has moved clockSaveEvery or more since it was last
// saved. Without it, only Close and expiry saved the clock, and a crash
// followed by a restart on a clock stepped back revived leases that had run
// out. Saving on a commit that writes anyway costs one small record, and
// at most once per clockSaveEvery under load, not once per commit.
func (db *DB) saveClockLocked(w *writeTx) error {
	now := w.now.UnixNano()
	if db.clockSaved > now-int64(clockSaveEvery) {
		return nil
	}
	w.clockSaved = true
	return layout.WriteExpiry(w.btx, layout.Expiry{Floor: db.windows.Floor(), ClockHigh: now})
}
