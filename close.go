package oncekv

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bucket"
)

// loadSavedClock remembers, at Open, the clock's high-water mark the file
// holds, for closeNeedsSave.
func (db *DB) loadSavedClock(tx *bolt.Tx) error {
	exp, err := bucket.ReadExpiry(tx)
	db.savedClock.Store(exp.ClockHigh)
	return err
}

// closeNeedsSave reports whether Close has anything to write: the clock's
// high-water mark, when the store's clock has read later than what the
// file holds (Open, and Expire when it moves the floor, keep savedClock up
// to date). A store opened and closed untouched is left byte for byte as
// it was, without a commit or an fsync: backups, read-only media and
// file-change monitors see no change where nothing changed. A read-only
// store never writes.
func (db *DB) closeNeedsSave() bool {
	return !db.opts.ReadOnly && db.clock.high.Load() > db.savedClock.Load()
}
