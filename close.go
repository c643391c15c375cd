package oncekv

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bucket"
)

// loadSavedClock remembers, at Open, the clock's high-water mark the file
// holds, for closeNeedsSave.
func (db *DB) loadSavedClock(tx *bolt.Tx) error {
	exp, err := bucket.ReadExpiry(tx)
	db.savedClock = exp.ClockHigh
	return err
}

// closeNeedsSave reports whether Close has anything to write: the clock's
// high-water mark, when this DB committed a write since Open and read the
// clock past what the file holds. A store opened and closed untouched, or
// only read (duplicates, look-ups, View), is left byte for byte as it was,
// without a commit or an fsync: backups, read-only media and file-change
// monitors see no change where nothing changed. A clock reading that led
// to no write need not outlive the process: it decided nothing that a
// restart could contradict. A read-only store never writes.
func (db *DB) closeNeedsSave() bool {
	return !db.opts.ReadOnly && db.stats.commits.Load() > 0 && db.clock.high.Load() > db.savedClock
}
