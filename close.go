package oncekv

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
)

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

// closeSave is what Close writes for the next Open, in one transaction.
type closeSave struct {
	// clock: the clock's high-water mark, when the store's clock has read
	// later than what the file holds (Open, expiry and the write
	// transactions that save the clock keep clockSaved up to date; see
	// saveClockLocked), so a clock stepped back across the restart does not
	// revive leases.
	clock bool
	// newest: the newest window's filter, unless the file's filter is
	// already current, so the next Open loads it instead of reading every
	// key of the window (see loadNewestFilter).
	newest *windowFilter
	// sealed: filters of sealed windows that Open had to rebuild.
	sealed []windowFilter
}

// windowFilter is a window's start and its in-memory filter.
type windowFilter struct {
	start  int64
	filter *bloom.Filter
}

// closeNeedsSave returns what Close has to write; nothing (ok false) for a
// store opened and closed untouched whose persisted filters are current:
// such a store is left byte for byte as it was, without a commit or an
// fsync, so backups, read-only media and file-change monitors see no change
// where nothing changed. A read-only store never writes. Close calls it
// once every call in flight has ended, so clockSaved needs no lock.
func (db *DB) closeNeedsSave() (save closeSave, ok bool) {
	if db.opts.ReadOnly {
		return save, false
	}
	save.clock = db.clock.high.Load() > db.clockSaved
	if db.filtersOn() {
		if n := db.windows.Newest(); n != nil && n.Filter != nil && !db.newestFilterCurrent() {
			save.newest = &windowFilter{n.Start, n.Filter}
		}
		for _, start := range db.opened.rebuiltSealed {
			if w := db.windows.Find(start); w != nil && w != db.windows.Newest() && w.Filter != nil {
				save.sealed = append(save.sealed, windowFilter{start, w.Filter})
			}
		}
	}
	return save, save.clock || save.newest != nil || len(save.sealed) > 0
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

// writeLocked writes save in w. The newest window's filter is stamped with
// w's transaction: it describes the file exactly as w commits it, since
// nothing writes after Close.
func (save closeSave) writeLocked(db *DB, w *writeTx) error {
	if save.clock {
		err := layout.WriteExpiry(w.btx, layout.Expiry{Floor: db.windows.Floor(), ClockHigh: w.now.UnixNano()})
		if err != nil {
			return err
		}
	}
	for _, s := range save.sealed {
		enc, err := s.filter.MarshalBinary()
		if err == nil {
			err = layout.PutFilter(w.btx, s.start, enc)
		}
		if err != nil {
			return err
		}
	}
	if save.newest == nil {
		return nil
	}
	enc, err := save.newest.filter.MarshalBinary()
	if err != nil {
		return err
	}
	return layout.PutNewestFilter(w.btx, save.newest.start, enc)
}
