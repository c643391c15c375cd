package oncekv

import (
	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
)

// Close waits for the calls in flight, stops the background expiry, saves
// what the next Open needs (the clock, the newest window's Bloom filter,
// the ghost filters, the window advisor's report), then closes the file; a
// store opened and closed untouched (duplicates included) is left byte for
// byte as it was. A store that cannot write still closes, with a
// warning. Every later call returns ErrClosed; a second Close waits for the
// first and returns nil.
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
	if save, ok := db.closeNeedsSave(); ok {
		// Saved at the latest reading, taking no new one: the next Open
		// resumes from what this store acted on.
		db.closing = true
		err := db.write(func(w *writeTx) error { return save.put(db, w) })
		if err != nil && save.clock && (save.newest != nil || len(save.sealed) > 0 || save.ghostsDirty || save.advisor != nil) {
			db.log.Warn("closing without saving the Bloom filters", "path", db.path, "err", err)
			save = closeSave{clock: true}
			err = db.write(func(w *writeTx) error { return save.put(db, w) })
		}
		if err != nil {
			db.log.Warn("closing without saving what the next Open needs", "path", db.path,
				"clock", save.clock, "filters", save.newest != nil || len(save.sealed) > 0 || save.ghostsDirty, "advisor", save.advisor != nil, "err", err)
		}
	}
	db.snaps.close() // bbolt's Close waits for every read transaction
	return db.bolt.Close()
}

// closeSave is what Close writes for the next Open, in one transaction.
type closeSave struct {
	// clock: the clock has read later than the file holds, so that a clock
	// stepped back across the restart does not revive leases.
	clock bool
	// newest: the newest window's filter, unless the file's is current.
	newest *windowFilter
	// sealed: filters of sealed windows that Open had to rebuild.
	sealed []windowFilter
	// ghosts: the ghost filters (ghosts.go), when they changed.
	ghosts      []layout.Ghost
	ghostsDirty bool
	// advisor: the window advisor's report, when this DB counted some.
	advisor *layout.Advisor
}

// windowFilter is a window's start and its in-memory filter.
type windowFilter struct {
	start  int64
	filter *bloom.Filter
}

// closeNeedsSave returns what Close has to write, ok false for nothing (a
// read-only store, or one untouched whose filters are current). Close calls
// it once every call has ended, so clockSaved needs no lock.
func (db *DB) closeNeedsSave() (save closeSave, ok bool) {
	if db.opts.ReadOnly {
		return save, false
	}
	save.clock = db.clock.high.Load() > db.clockSaved && !db.clock.anchorOnly.Load()
	if db.filtersOn() {
		if n := db.live.Newest(); n != nil && n.Filter != nil && !db.newestFilterCurrent() {
			save.newest = &windowFilter{n.Start, n.Filter}
		}
		for _, start := range db.opened.rebuiltSealed {
			if w := db.live.Find(start); w != nil && w != db.live.Newest() && w.Filter != nil {
				save.sealed = append(save.sealed, windowFilter{start, w.Filter})
			}
		}
		save.ghosts, save.ghostsDirty = db.ghostsToSave()
	}
	// The advisor's report rides on a Close that writes anyway (the clock
	// moved on, as it does in any real run): duplicates alone write nothing.
	save.advisor, _ = db.advisorToSave(db.clock.last())
	return save, save.clock || save.newest != nil || len(save.sealed) > 0 || save.ghostsDirty
}

// put writes save in w, stamping the newest window's filter with w's
// transaction: nothing writes after Close.
func (save closeSave) put(db *DB, w *writeTx) error {
	if save.clock {
		err := layout.WriteExpiry(w.btx, layout.Expiry{Floor: db.live.Floor(), ClockHigh: w.now.UnixNano()})
		if err != nil {
			return err
		}
	}
	if save.advisor != nil {
		if err := layout.WriteAdvisor(w.btx, save.advisor); err != nil {
			return err
		}
	}
	if save.ghostsDirty {
		if err := layout.PutGhosts(w.btx, save.ghosts); err != nil {
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
