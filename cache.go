package oncekv

import (
	"bytes"
	"slices"
	"time"

	"github.com/oncekv/oncekv/internal/dupcache"
	"github.com/oncekv/oncekv/internal/layout"
)

// The duplicate cache (DB.dups): the final marks that writes committed and
// duplicates found in a read transaction, so that a duplicate of the key
// is answered without one. See package dupcache for why it stays truthful;
// this file holds the store's side of the bargain: readers offer what a
// snapshot found, and every write transaction pins the keys whose existing
// mark it overwrites or deletes until it has ended, then offers the final
// marks it wrote.

// answerFromCache answers o from the cache of final marks, and reports
// whether it could. A cached mark in a window that has expired since is
// gone, as a read would find it.
func (db *DB) answerFromCache(o *op) bool {
	e := db.dups.Get(o.mhash, o.mkey)
	if e == nil || e.Found.Window < db.live.Floor() {
		return false
	}
	m := e.Found
	m.Response = bytes.Clone(m.Response) // the caller's to modify; the entry's stays
	return o.answer(&m, time.Time{})     // final: the time does not matter
}

// offer puts m, the final mark o's snapshot found, in the cache for the
// key's next duplicate. The response o was answered with is the caller's,
// so the entry keeps a copy of its own; and the payload, when it fits and
// matched the mark, so that the next duplicate need not hash it.
func (db *DB) offer(epoch uint64, o *op, m *layout.FoundMark) {
	if !dupcache.Fits(o.mkey, &m.Mark, 0) {
		return
	}
	e := &dupcache.Entry{Hash: o.mhash, MKey: o.mkey, Found: *m}
	e.Found.Response = bytes.Clone(m.Response)
	if len(o.req.Fingerprint) == 0 && o.hash == m.PayloadHash && dupcache.Fits(o.mkey, &m.Mark, len(o.req.Payload)) {
		e.Payload, e.HasPayload = bytes.Clone(o.req.Payload), true
	}
	db.dups.Put(epoch, e)
}

// pin keeps the key hashed h (bloom.Sum64 of its mark key) out of the
// duplicate cache until w has ended: w overwrites or deletes its mark. A
// final mark w wrote for the key before is not cached after all (see
// cacheFinalsLocked): only the key's last write may be.
func (w *writeTx) pin(h uint64) {
	w.db.dups.Pin(h)
	w.pinned = append(w.pinned, h)
	w.finals = slices.DeleteFunc(w.finals, func(f finalMark) bool { return f.hash == h })
}

// finalMark is a DONE or FAILED mark a write transaction wrote, for the
// duplicate cache once it has committed.
type finalMark struct {
	hash   uint64
	mkey   []byte
	window int64
	mark   layout.Mark
}

// noteFinal records m, just written as the mark of mkey (hashed h) in
// window, when the duplicate cache may hold it.
func (w *writeTx) noteFinal(h uint64, window int64, mkey []byte, m *layout.Mark) {
	if dupcache.Fits(mkey, m, 0) {
		f := finalMark{hash: h, mkey: mkey, window: window, mark: *m}
		// As a read of the mark would find it: only the stored part of the
		// payload hash (a loaded mark may bring a whole SHA-256).
		f.mark.PayloadHash = layout.Fingerprint(m.PayloadHash)
		w.finals = append(w.finals, f)
	}
}

// cacheFinalsLocked runs after w committed, under writeMu: it unpins the
// keys w pinned and caches the final marks it wrote, so that even the
// first duplicate of a key, which usually comes soon after its first
// delivery, needs no read transaction. Nothing can have changed them since
// the commit: the next writer waits for writeMu.
func (db *DB) cacheFinalsLocked(w *writeTx) {
	db.dups.Unpin(w.pinned)
	w.pinned = nil
	epoch := db.dups.Epoch()
	for i := range w.finals {
		f := &w.finals[i]
		e := &dupcache.Entry{Hash: f.hash, MKey: f.mkey, Found: layout.FoundMark{Mark: f.mark, Window: f.window}}
		// The response may be the caller's slice (the result it is given,
		// or a Complete's argument): the entry keeps its own.
		e.Found.Response = bytes.Clone(f.mark.Response)
		db.dups.Put(epoch, e)
	}
}
