package oncekv

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// minFilterKeys is the fewest keys a filter is planned for; it grows past
// its plan.
const minFilterKeys = 4096

func (db *DB) filtersOn() bool { return db.opts.BloomFalsePositiveRate > 0 }

// newFilter returns an empty filter planned for about keys keys.
func (db *DB) newFilter(keys uint64) (*bloom.Filter, error) {
	return bloom.New(max(keys, minFilterKeys), db.opts.BloomFalsePositiveRate)
}

// openedFilters is what Open learnt about the persisted filters, for Close;
// set before the DB is shared and read by Close alone.
type openedFilters struct {
	// provenTx is the transaction at which Open loaded the newest window's
	// persisted filter, 0 when it rebuilt it: while the file is still at
	// it, Close has nothing to write.
	provenTx int
	// rebuiltSealed are the sealed windows whose filter Open rebuilt, for
	// Close to persist.
	rebuiltSealed []int64
	// rebuilt counts the filters Open rebuilt (FiltersRebuiltAtOpen).
	rebuilt int
	// staleStamp: the file's newest-window filter is stale, for a writable
	// Open to delete (layout.DropNewestFilter).
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

// loadNewestFilter returns the newest window's filter the last clean Close
// persisted, when the file proves it current (layout.FilterStamp), else nil
// for a rebuild: a filter lacking a committed key would run an effect
// twice. raw, state and err are layout.NewestFilter's, in Open's first
// transaction txid.
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

// mayHaveMark reports whether any of live, or a tombstone window, might
// hold the key hashed h: false means certainly never seen, as of the last
// commit.
func (db *DB) mayHaveMark(live []*windowset.Live, h uint64) bool {
	for _, w := range live {
		if w.Filter == nil || db.filterMayContain(w.Filter, h) {
			return true
		}
	}
	return db.mayHaveTomb(h)
}

// filterMayContain asks f about h, through filterHook when a test set one.
func (db *DB) filterMayContain(f *bloom.Filter, h uint64) bool {
	maybe := f.MayContain(h)
	if db.filterHook != nil {
		return db.filterHook(maybe)
	}
	return maybe
}

// sealLocked persists the newest window's filter, with the marks the
// current transaction added to it, before a newer window gets its first
// mark: a sealed window never gains a key, so Open can load its filter.
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

// withMarksOfCurrent returns enc, the encoded filter of window start, with
// the current transaction's new marks there added; the in-memory filter is
// left alone, as the transaction may roll back.
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

// newestFilterCurrent reports whether the file's newest-window filter is
// still current: Open loaded it, and nothing committed since.
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
