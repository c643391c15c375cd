package oncekv

import (
	"bytes"
	"time"

	"github.com/oncekv/oncekv/internal/dupcache"
	"github.com/oncekv/oncekv/internal/layout"
)

// The duplicate cache (DB.dups): the final marks that duplicates found in
// a read transaction, so that the next duplicate of the key is answered
// without one. See package dupcache for why it stays truthful; this file
// holds the store's side of the bargain: readers offer what a snapshot
// found, and every write transaction pins the keys whose existing mark it
// overwrites or deletes until it has ended.

// answerFromCache answers o from the cache of final marks, and reports
// whether it could. A cached mark in a window that has expired since is
// gone, as a read would find it.
func (db *DB) answerFromCache(o *op) bool {
	e := db.dups.Get(o.mhash, o.mkey)
	if e == nil || e.Found.Window < db.windows.Floor() {
		return false
	}
	m := e.Found
	m.Response = bytes.Clone(m.Response) // the caller's to modify; the entry's stays
	return o.answer(&m, time.Time{})     // final: the time does not matter
}

// offer puts m, the final mark o's snapshot found, in the cache for the
// key's next duplicate. The response o was answered with is the caller's,
// so the entry keeps a copy of its own.
func (db *DB) offer(epoch uint64, o *op, m *layout.FoundMark) {
	if !dupcache.Cacheable(o.mkey, &m.Mark) {
		return
	}
	e := &dupcache.Entry{Hash: o.mhash, MKey: o.mkey, Found: *m}
	e.Found.Response = bytes.Clone(m.Response)
	db.dups.Put(epoch, e)
}

// pin keeps the key hashed h (bloom.Sum64 of its mark key) out of the
// duplicate cache until w has ended: w overwrites or deletes its mark.
func (w *writeTx) pin(h uint64) {
	w.db.dups.Pin(h)
	w.pinned = append(w.pinned, h)
}
