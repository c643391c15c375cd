package oncekv

import (
	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
)

// Close waits for the calls in flight to finish, then closes the file.
// Before it does, it stores what the next Open would otherwise rebuild by
// reading every key of the newest window, that window's Bloom filter (a
// store opened and closed untouched is left as it was). Every later call
// returns ErrClosed. Closing twice is not an error: a
// Close that finds another one under way waits for it, so that the file is
// closed (and may be opened again) whichever Close returns first.
func (db *DB) Close() error {
	if db.expirer.stop != nil {
		db.expirer.stop()
		<-db.expirer.done
	}
	if !db.life.close() {
		<-db.life.done
		return nil
	}
	defer close(db.life.done)
	// Keep the clock's high-water mark and the newest window's filter for
	// the next Open (see clock.go and loadNewestFilter), only when there is
	// something new to keep (see closeNeedsSave). A store that cannot write
	// any more (poisoned, full disk) still closes: without the filters, the
	// next Open rebuilds them; the clock is tried again on its own, being
	// a few bytes where a filter may be megabytes.
	if save, ok := db.closeNeedsSave(); ok {
		// Close saves the latest reading the store took, and takes no
		// new one: what the next Open resumes from is what this store
		// acted on, whether or not Close had filters to write too.
		db.closing = true
		err := db.write(func(w *writeTx) error { return save.put(db, w) })
		if err != nil && save.clock && (save.newest != nil || len(save.sealed) > 0) {
			db.log.Warn("closing without saving the Bloom filters", "path", db.path, "err", err)
			save = closeSave{clock: true}
			err = db.write(func(w *writeTx) error { return save.put(db, w) })
		}
		if err != nil {
			db.log.Warn("closing without saving what the next Open needs", "path", db.path,
				"clock", save.clock, "filters", save.newest != nil || len(save.sealed) > 0, "err", err)
		}
	}
	return db.bolt.Close()
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
		if n := db.live.Newest(); n != nil && n.Filter != nil && !db.newestFilterCurrent() {
			save.newest = &windowFilter{n.Start, n.Filter}
		}
		for _, start := range db.opened.rebuiltSealed {
			if w := db.live.Find(start); w != nil && w != db.live.Newest() && w.Filter != nil {
				save.sealed = append(save.sealed, windowFilter{start, w.Filter})
			}
		}
	}
	return save, save.clock || save.newest != nil || len(save.sealed) > 0
}

// put writes save in w. The newest window's filter is stamped with
// w's transaction: it describes the file exactly as w commits it, since
// nothing writes after Close.
func (save closeSave) put(db *DB, w *writeTx) error {
	if save.clock {
		err := layout.WriteExpiry(w.btx, layout.Expiry{Floor: db.live.Floor(), ClockHigh: w.now.UnixNano()})
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
