package oncekv

import (
	"context"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// ExpireStats reports what one Expire call dropped and what it cost.
type ExpireStats struct {
	// Windows is the number of windows deleted.
	Windows int
	// Marks is the number of marks deleted.
	Marks uint64
	// Steps is the number of write transactions used, each deleting at most
	// Options.ExpireStep marks.
	Steps int
	// LongestStep is the longest one step held the write lock.
	LongestStep time.Duration
	// Duration is the wall time of the whole call.
	Duration time.Duration
	// Tombstones is the number of tombstones the windows left, with
	// Options.TombstoneRetention.
	Tombstones uint64
	// TombstoneWindows and TombstonesDropped count the tombstone windows
	// deleted, past TombstoneRetention, and their tombstones.
	TombstoneWindows  int
	TombstonesDropped uint64
}

// Expire drops every window whose newest possible mark is older than
// Options.Retention by the store's clock; a key whose mark was dropped is
// applied again if delivered again. The windows stop answering at once,
// then their marks are deleted in steps of Options.ExpireStep, so writers
// wait at most one step; if ctx ends or the process dies midway, the next
// Expire finishes. A clock stepped back only delays expiry, and a window
// holding a live claim's lease is kept, with the newer ones, until it ends
// (docs/design/windows-and-filters.md). Errors: ctx's, ErrReadOnly,
// ErrClosed, the commit's.
func (db *DB) Expire(ctx context.Context) (ExpireStats, error) {
	if !db.life.enter() {
		return ExpireStats{}, ErrClosed
	}
	defer db.life.exit()
	if db.opts.ReadOnly {
		return ExpireStats{}, ErrReadOnly
	}
	db.expireMu.Lock()
	defer db.expireMu.Unlock()
	began := time.Now()
	var st ExpireStats
	err := db.expire(ctx, &st)
	st.Duration = time.Since(began)
	return st, err
}

func (db *DB) expire(ctx context.Context, st *ExpireStats) error {
	// The earlier of the store's time and the raw reading (docs/design/clock.md).
	store, raw := db.clock.readRaw()
	now := min(store.UnixNano(), raw.UnixNano())
	db.rotateGhosts(now)
	due := db.expirable(now)
	floor := db.live.Floor()
	for _, w := range due {
		floor = max(floor, db.windowConfig.End(w.Start))
	}
	if floor > db.live.Floor() {
		// Parked keys first: they are kept until resolved.
		carry := func(w *writeTx) error { return w.carryParkedLocked(floor) }
		if !db.tombsOn() {
			if err := db.raiseFloor(st, floor, carry); err != nil {
				return err
			}
		} else {
			if err := db.expireTx(st, carry, nil); err != nil {
				return err
			}
			for _, w := range due {
				if err := db.tombstoneWindow(ctx, st, w); err != nil {
					return err
				}
			}
		}
	}

	// Delete what lies below the floor, an interrupted call's left-overs too.
	var doomed []int64
	if err := db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			return layout.ForEachWindow(btx, false, func(start int64, _ *bolt.Bucket) error {
				if start < db.live.Floor() {
					doomed = append(doomed, start)
				}
				return nil
			})
		})
	}); err != nil {
		return err
	}
	for _, start := range doomed {
		for gone := false; !gone; {
			if err := ctx.Err(); err != nil {
				return err
			}
			var deleted int
			err := db.expireTx(st, func(w *writeTx) (err error) {
				deleted, gone, err = layout.ExpireSome(w.btx, start, db.opts.ExpireStep, func(mkey []byte) { db.ghostAdd(bloom.Sum64(mkey)) })
				return err
			}, nil)
			if err != nil {
				return err
			}
			st.Marks += uint64(deleted)
			db.stats.expiredMarks.Add(uint64(deleted))
		}
		st.Windows++
		db.stats.expiredWindows.Add(1)
	}
	return db.expireTombs(st, now)
}

// raiseFloor raises the expiry floor to floor in one small transaction,
// after first (if not nil) in the same one, so that the windows below it
// stop answering at once. The clock's high-water mark is saved with it.
func (db *DB) raiseFloor(st *ExpireStats, floor int64, first func(w *writeTx) error) error {
	var high int64
	return db.expireTx(st, func(w *writeTx) error {
		if first != nil {
			if err := first(w); err != nil {
				return err
			}
		}
		high = db.clock.read().UnixNano()
		if a, ok := db.advisorToSave(time.Unix(0, high)); ok {
			// Saved with each floor too, so that a crash loses an hour of it.
			if err := layout.WriteAdvisor(w.btx, a); err != nil {
				return err
			}
		}
		return layout.WriteExpiry(w.btx, layout.Expiry{Floor: floor, ClockHigh: high})
	}, func() {
		db.live.DropBelow(floor)
		db.clockSaved = high // learned under the write lock, as saveClockLocked's
	})
}

// expireTx runs one expiry transaction under the write lock, then learned
// (if any) before releasing it, and records how long the lock was held.
func (db *DB) expireTx(st *ExpireStats, fn func(w *writeTx) error, learned func()) error {
	db.writeMu.Lock()
	defer db.writeMu.Unlock() // released on every exit, a panic in fn or learned included
	held := time.Now()
	defer func() {
		st.LongestStep = max(st.LongestStep, time.Since(held))
		st.Steps++
	}()
	err := db.writeLocked(fn)
	if err == nil && learned != nil {
		learned()
	}
	return err
}

// expireInBackground runs Expire every Options.ExpireInterval until Close.
func (db *DB) expireInBackground(ctx context.Context) {
	defer close(db.expirer.done)
	t := time.NewTicker(db.opts.ExpireInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			st, err := db.Expire(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				db.log.Error("background expiry failed", "err", err)
			case st.Windows > 0:
				db.log.Info("expired windows", "windows", st.Windows, "marks", st.Marks,
					"longest_step", st.LongestStep, "duration", st.Duration)
			}
		}
	}
}

// ExpireDue returns the windows Expire would drop now, oldest first, and
// drops nothing: a dry run, reading the clock as Expire does. It works on a
// read-only DB.
func (db *DB) ExpireDue() ([]WindowStats, error) {
	if !db.life.enter() {
		return nil, ErrClosed
	}
	defer db.life.exit()
	store, raw := db.clock.readRaw()
	var due []WindowStats
	for _, w := range db.expirable(min(store.UnixNano(), raw.UnixNano())) {
		due = append(due, WindowStats{
			Start: time.Unix(0, w.Start),
			End:   time.Unix(0, db.windowConfig.End(w.Start)),
			Marks: uint64(w.Marks.Load()),
		})
	}
	return due, nil
}

// expirable returns the live windows expired at now (Unix nanoseconds),
// oldest first, stopping at the first one to keep, a live lease's included:
// the floor drops everything below it.
func (db *DB) expirable(now int64) []*windowset.Live {
	live := db.live.Windows()
	for i, w := range live {
		if now < db.windowConfig.ExpiresAt(w.Start) || now < w.LeaseEnd.Load() {
			return live[:i]
		}
	}
	return live
}
