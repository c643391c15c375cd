package oncekv

import (
	"bytes"
	"slices"
	"time"

	"github.com/oncekv/oncekv/internal/dupcache"
	"github.com/oncekv/oncekv/internal/layout"
)

// The store's side of the duplicate cache (DB.dups, package dupcache):
// readers offer the final marks a snapshot found; every write transaction
// pins the keys whose mark it overwrites or deletes until it has ended, then
// caches the final marks it wrote (docs/design/duplicate-cache.md).

// answerFromCache answers o from the cache, and reports whether it could;
// an entry of a window expired since is ignored.
func (db *DB) answerFromCache(o *op) bool {
	e := db.dups.Get(o.mhash, o.mkey)
	if e == nil || e.Found.Window < db.live.Floor() {
		return false
	}
	m := e.Found
	m.Response = bytes.Clone(m.Response) // the caller's to modify; the entry's stays
	return o.answer(&m, time.Time{})     // final: the time does not matter
}

// offer caches m, the final mark o's snapshot found, with a copy of the
// response, and of the payload when it matched, so that the next duplicate
// need not hash it.
func (db *DB) offer(epoch uint64, o *op, m *layout.FoundMark) {
	db.offerMark(epoch, o.mhash, o.mkey, o.req, o.hash, m)
}

// offerMark is offer given the op's parts: mkey (hashed h) is copied, so it
// may live on the caller's stack; hash is req's payload hash.
func (db *DB) offerMark(epoch, h uint64, mkey []byte, req *Request, hash [layout.HashSize]byte, m *layout.FoundMark) {
	if m.Tombstone || !dupcache.Fits(mkey, &m.Mark, 0) {
		return
	}
	keep := len(req.Fingerprint) == 0 && hash == m.PayloadHash && dupcache.Fits(mkey, &m.Mark, len(req.Payload))
	// The entry's own copies of the key, the response and the payload, in
	// one allocation; each capped, so that no append reaches the next.
	n := len(mkey) + len(m.Response)
	if keep {
		n += len(req.Payload)
	}
	own := make([]byte, 0, n)
	e := &dupcache.Entry{Hash: h, Found: *m}
	e.MKey, own = carve(own, mkey)
	e.Found.Response = nil
	if m.Response != nil {
		e.Found.Response, own = carve(own, m.Response)
	}
	if keep {
		e.Payload, _ = carve(own, req.Payload)
		e.HasPayload = true
	}
	db.dups.Put(epoch, e)
}

// carve copies b to the end of buf, whose capacity must hold it, and
// returns the copy, capped at its length, and buf grown by it.
func carve(buf, b []byte) (cp, rest []byte) {
	start := len(buf)
	buf = append(buf, b...)
	return buf[start:len(buf):len(buf)], buf
}

// pin keeps the key hashed h out of the cache until w has ended, and drops
// a final mark w wrote for it before: only the key's last write is cached.
func (w *writeTx) pin(h uint64) {
	w.db.dups.Pin(h)
	w.pinned = append(w.pinned, h)
	w.finals = slices.DeleteFunc(w.finals, func(f finalMark) bool { return f.hash == h })
}

// finalMark is a final mark a write transaction wrote, to cache after the
// commit.
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
		// As a read would find it: only the stored part of the payload hash.
		f.mark.PayloadHash = layout.Fingerprint(m.PayloadHash)
		w.finals = append(w.finals, f)
	}
}

// cacheFinalsLocked runs after w committed, under writeMu: it unpins w's
// keys and caches the final marks w wrote, so even a key's first duplicate
// needs no read transaction.
func (db *DB) cacheFinalsLocked(w *writeTx) {
	db.dups.Unpin(w.pinned)
	w.pinned = nil
	epoch := db.dups.Epoch()
	for i := range w.finals {
		f := &w.finals[i]
		e := &dupcache.Entry{Hash: f.hash, MKey: f.mkey, Found: layout.FoundMark{Mark: f.mark, Window: f.window}}
		// The response may be the caller's slice: the entry keeps its own.
		e.Found.Response = bytes.Clone(f.mark.Response)
		db.dups.Put(epoch, e)
	}
}
