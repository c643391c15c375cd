package oncekv

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
)

// Ghost filters: once every record of a window's keys is gone (its marks,
// then its tombstones), a Bloom filter of its keys is kept for a while, so
// that a key applied again afterwards is counted as a late duplicate
// (Counters.LateDuplicates): the one signal that the window is too short
// for how late the handler's redeliveries come. The filters only estimate
// and never decide: a "maybe" counts a key, a false positive counts a new
// one (at ghostFalsePositiveRate), and a store killed before Close loses
// the keys its filters learnt since the last Close (docs/design/tombstones.md).
//
// A key goes into the current generation when its window leaves the live
// windows: its tombstones, if any, still answer it until they expire, and
// only a key nothing answered reaches the ghosts. Generations turn every
// ghostPeriod (TombstoneRetention, or Retention without tombstones), so a
// key is remembered for one to two periods after its window left.

// ghostFalsePositiveRate is the ghosts' rate: about 5 bits per key.
const ghostFalsePositiveRate = 0.1

// ghostSet holds the current and the previous generation; readers take
// them with one atomic load.
type ghostSet struct {
	gens atomic.Pointer[ghostGens]
	// dirty: changed since Open, for Close to save.
	dirty atomic.Bool
}

type ghostGens struct{ current, previous *ghostGen }

type ghostGen struct {
	since  int64 // Unix nanoseconds
	filter *bloom.Filter
}

// ghostPeriod is how long a generation is current.
func (db *DB) ghostPeriod() time.Duration {
	if db.tombsOn() {
		return db.opts.TombstoneRetention
	}
	return db.opts.Retention
}

// rotateGhosts makes the current generation the previous one once it is
// a period old, and drops the previous one a period later. Expiry calls
// it, under expireMu, before it adds keys; the next key added starts a
// new current generation.
func (db *DB) rotateGhosts(now int64) {
	g := db.ghosts.gens.Load()
	if g == nil {
		return
	}
	period, next := int64(db.ghostPeriod()), *g
	if next.current != nil && now >= next.current.since+period {
		next.previous, next.current = next.current, nil
	}
	if next.previous != nil && now >= next.previous.since+2*period {
		next.previous = nil
	}
	if next != *g {
		db.ghosts.gens.Store(&next)
		db.ghosts.dirty.Store(true)
	}
}

// ghostAdd teaches the current generation the key hashed h (bloom.Sum64
// of its mark key), whose window is leaving the live windows; the first
// key of a generation starts it, planned for about a period's keys.
// Expiry calls it, under expireMu.
func (db *DB) ghostAdd(h uint64) {
	if !db.filtersOn() {
		return
	}
	g := db.ghosts.gens.Load()
	if g == nil || g.current == nil {
		var live uint64
		for _, w := range db.live.Windows() {
			live += uint64(max(w.Marks.Load(), 0))
		}
		f, err := bloom.New(max(live*uint64(db.ghostPeriod()/db.opts.Retention), minFilterKeys), ghostFalsePositiveRate)
		if err != nil {
			db.log.Error("no ghost filter: late duplicates are not counted", "err", err)
			return
		}
		next := &ghostGens{current: &ghostGen{since: db.clock.last().UnixNano(), filter: f}}
		if g != nil {
			next.previous = g.previous
		}
		db.ghosts.gens.Store(next)
		g = next
	}
	g.current.filter.Add(h)
	db.ghosts.dirty.Store(true)
}

// noteIfLate counts, and logs at warn, a key just applied as new that a
// ghost filter says an expired window may have held: a late duplicate,
// estimated.
func (db *DB) noteIfLate(ctx context.Context, handler, key string, h uint64) {
	g := db.ghosts.gens.Load()
	if g == nil {
		return
	}
	for _, gen := range []*ghostGen{g.current, g.previous} {
		if gen != nil && gen.filter.MayContain(h) {
			db.stats.countExtra(handler, countLate)
			db.log.LogAttrs(ctx, slog.LevelWarn, "late duplicate: applied again after every record of the key had expired (estimated)",
				slog.String("handler", handler), slog.String("key", key),
				slog.Duration("retention", db.opts.Retention), slog.Duration("tombstone_retention", db.opts.TombstoneRetention))
			return
		}
	}
}

// loadGhosts reads the generations the last clean Close saved; a damaged
// one is dropped with a warning, as it only estimates.
func (db *DB) loadGhosts(tx *bolt.Tx) error {
	if !db.filtersOn() {
		return nil
	}
	saved, err := layout.GetGhosts(tx)
	if err != nil {
		db.log.Warn("dropping a damaged ghost filter: late duplicates are undercounted for a while", "err", err)
	}
	var g ghostGens
	for i, s := range saved {
		f, err := bloom.Decode(s.Filter)
		if err != nil {
			db.log.Warn("dropping a damaged ghost filter: late duplicates are undercounted for a while", "err", err)
			break
		}
		gen := &ghostGen{since: s.Since, filter: f}
		if i == 0 {
			g.current = gen
		} else {
			g.previous = gen
			break
		}
	}
	if g.current != nil {
		db.ghosts.gens.Store(&g)
	}
	return nil
}

// ghostsToSave returns the generations for Close to save, newest first,
// nil when nothing changed since Open.
func (db *DB) ghostsToSave() ([]layout.Ghost, bool) {
	if !db.ghosts.dirty.Load() {
		return nil, false
	}
	var out []layout.Ghost
	if g := db.ghosts.gens.Load(); g != nil {
		for _, gen := range []*ghostGen{g.current, g.previous} {
			if gen == nil {
				break
			}
			enc, err := gen.filter.MarshalBinary()
			if err != nil {
				return nil, false
			}
			out = append(out, layout.Ghost{Since: gen.since, Filter: enc})
		}
	}
	return out, true
}
