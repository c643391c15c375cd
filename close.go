package oncekv

// closeNeedsSave reports whether Close has anything to write: the clock's
// high-water mark, when the store's clock has read later than what the
// file holds (Open, expiry and the write transactions that save the clock
// keep clockSaved up to date; see saveClockLocked). A store opened and
// closed untouched is left byte for byte as it was, without a commit or an
// fsync: backups, read-only media and file-change monitors see no change
// where nothing changed. A read-only store never writes. Close calls it
// once every call in flight has ended, so clockSaved needs no lock.
func (db *DB) closeNeedsSave() bool {
	return !db.opts.ReadOnly && db.clock.high.Load() > db.clockSaved
}
