package oncekv

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// minFilterKeys is the smallest number of keys a window's filter is planned
// for. The filter grows past its plan, so a small guess is cheap.
const minFilterKeys = 4096

func (db *DB) filtersOn() bool { return db.opts.BloomFalsePositiveRate > 0 }

// newFilter returns an empty filter planned for about keys keys.
func (db *DB) newFilter(keys uint64) (*bloom.Filter, error) {
	return bloom.New(max(keys, minFilterKeys), db.opts.BloomFalsePositiveRate)
}

// openedFilters is what Open learnt about the persisted Bloom filters, for
// Close to know what it must persist. Open sets it before the DB is shared;
// after that only Close reads it, once every call in flight has ended, so
// it needs no lock.
type openedFilters struct {
	// provenTx is the bbolt transaction the file was at when Open loaded
	// the newest window's filter that the last clean Close persisted; 0
	// when Open rebuilt it. While the file is still there, that filter is
	// still current, and Close has nothing to write.
	provenTx int
	// rebuiltSealed are the sealed windows whose persisted filter was
	// missing or damaged, so Open rebuilt it from their keys. A sealed
	// window never gains a key, so Close can persist the rebuilt one and
	// spare the next Open the work.
	rebuiltSealed []int64
	// rebuilt counts the windows whose filter Open rebuilt by reading
	// every key (see FiltersRebuiltAtOpen in export_test.go).
	rebuilt int
	// staleStamp is set when the file holds a newest-window filter whose
	// stamp no longer matches it, for a writable Open to delete (see
	// layout.DropNewestFilter), whether or not filters are on.
	staleStamp bool
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

// mayHaveMark reports whether any of the live windows might hold the key
// hashed h (bloom.Sum64 of its mark key): false means the key was certainly
// never seen (as of the last commit), and the read transaction of the
// duplicate fast path can be skipped altogether.
func (db *DB) mayHaveMark(live []*windowset.Live, h uint64) bool {
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
	newest := db.live.Newest()
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

// newestFilterCurrent reports whether the file's persisted newest-window
// filter is still current: Open loaded it, and nothing committed since.
func (db *DB) newestFilterCurrent() bool {
	if db.opened.provenTx == 0 {
		return false
	}
	var now int
	if err := db.bolt.View(func(tx *bolt.Tx) error { now = tx.ID(); return nil }); err != nil {
		return false
	}
	return now == db.opened.provenTx
}
