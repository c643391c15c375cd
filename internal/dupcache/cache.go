// Package dupcache keeps final (DONE or FAILED) marks in memory, those
// written or read recently, so that a duplicate of their key is answered
// without a bbolt read transaction.
//
// A final mark never changes in place; it only disappears (its window
// expires, an operator forgets it) and may then be written afresh. The
// cache stays truthful with two rules:
//
//   - A writer pins the set of every key whose existing mark it overwrites
//     or deletes before its transaction commits (Pin), and unpins it after
//     the transaction ended, committed or not (Unpin). A pinned set answers
//     nothing, so no reader is answered from a mark the commit replaced.
//   - A reader takes the epoch (Epoch) before it opens the snapshot it reads
//     a mark from, and offers the mark with that epoch (Put). Unpin stamps
//     the set with an epoch greater than any taken before the commit, so a
//     mark read from a snapshot older than the commit is never answered
//     from, whenever it is offered. A writer may offer the marks it wrote
//     with the epoch taken after its commit and its Unpin, while no other
//     writer can run.
//
// Expiry deletes whole windows without naming their keys: the caller checks
// an entry's Window against the expiry floor.
package dupcache

import (
	"bytes"
	"math"
	"math/rand/v2"
	"sync/atomic"

	"github.com/oncekv/oncekv/internal/layout"
)

// The cache's bounds. Its memory is bounded by construction, whatever the
// keys: at most Sets*Ways entries, each holding at most MaxEntryBytes of
// key, payload, response and error message beside its fixed fields (about
// 200 bytes), so under 16384 * 512 bytes, 8 MiB, plus 160 KiB of sets.
const (
	// Sets is the number of sets; a key's set is its hash modulo Sets.
	Sets = 4096
	// Ways is the number of entries per set.
	Ways = 4
	// MaxEntryBytes is the largest key plus response plus error message
	// (plus payload, when kept) an entry holds; a larger mark is not
	// cached and is always read.
	MaxEntryBytes = 256
)

// Entry is a final mark as a reader found it. It is immutable once Put.
type Entry struct {
	Hash uint64 // bloom.Sum64(MKey): the set and a quick compare
	MKey []byte
	// Found is the mark and its window. Its Response is the cache's own
	// copy: hand out copies of it.
	Found layout.FoundMark
	// Payload, when HasPayload, is a payload whose SHA-256 is the mark's
	// PayloadHash: a request with the same bytes matches without hashing.
	Payload    []byte
	HasPayload bool
	epoch      uint64
}

type set struct {
	ways [Ways]atomic.Pointer[Entry]
	// stamp is the epoch an entry must have been read at, or later, to be
	// answered from; math.MaxUint64 while pinned.
	stamp atomic.Uint64
}

// Cache is the cache of final marks. The zero value is empty and ready;
// every method is safe for concurrent use, and Pin and Unpin are called by
// one writer at a time.
type Cache struct {
	epoch atomic.Uint64
	sets  [Sets]set
}

func (c *Cache) setOf(h uint64) *set { return &c.sets[h%Sets] }

// Epoch returns the epoch to offer marks with, taken before opening the
// snapshot that reads them.
func (c *Cache) Epoch() uint64 { return c.epoch.Load() }

// Get returns the entry of mkey, whose hash is h, or nil.
func (c *Cache) Get(h uint64, mkey []byte) *Entry {
	s := c.setOf(h)
	stamp := s.stamp.Load()
	for i := range s.ways {
		e := s.ways[i].Load()
		if e != nil && e.Hash == h && e.epoch >= stamp && bytes.Equal(e.MKey, mkey) {
			return e
		}
	}
	return nil
}

// Fits reports whether an entry may hold the final mark m of mkey, with
// extra more bytes (a payload).
func Fits(mkey []byte, m *layout.Mark, extra int) bool {
	return (m.State == layout.Done || m.State == layout.Failed) &&
		len(mkey)+len(m.Response)+len(m.Error)+extra <= MaxEntryBytes
}

// Put offers e, a final mark read from a snapshot opened after Epoch
// returned epoch. It is dropped when a writer pinned or unpinned e's set
// since. e must not be changed afterwards.
func (c *Cache) Put(epoch uint64, e *Entry) {
	s := c.setOf(e.Hash)
	if epoch < s.stamp.Load() {
		return
	}
	e.epoch = epoch
	// The way of the same key, else an empty or stale one, else one at
	// random: keys crowding one set then take turns rather than two of
	// them evicting each other every time.
	victim := rand.IntN(Ways)
	for i := range s.ways {
		old := s.ways[i].Load()
		if old == nil || old.epoch < s.stamp.Load() || (old.Hash == e.Hash && bytes.Equal(old.MKey, e.MKey)) {
			victim = i
			break
		}
	}
	s.ways[victim].Store(e)
}

// AddPayload puts a copy of e that also holds payload, a payload whose
// SHA-256 is e's PayloadHash, so that the next request with these bytes
// need not hash them. The copy is as valid as e: it was read at e's epoch.
func (c *Cache) AddPayload(e *Entry, payload []byte) {
	n := *e
	n.Payload, n.HasPayload = bytes.Clone(payload), true
	c.Put(e.epoch, &n)
}

// Pin stops the set of the key hashed h from answering until Unpin: the
// caller's write transaction, not committed yet, changes or deletes the
// key's mark.
func (c *Cache) Pin(h uint64) { c.setOf(h).stamp.Store(math.MaxUint64) }

// Unpin lets the sets of hs answer again, from marks read after this call
// only, once the transaction that pinned them has ended.
func (c *Cache) Unpin(hs []uint64) {
	for _, h := range hs {
		c.setOf(h).stamp.Store(c.epoch.Add(1))
	}
}
