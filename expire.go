package oncekv

import (
	"context"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// ExpireStats reports what one Expire call dropped and what it cost.
type ExpireStats struct {
	// Windows is the number of windows deleted.
	Windows int
	// Marks is the number of marks deleted.
	Marks uint64
	// Steps is the number of write transactions expiry used. Each deletes
	// at most Options.ExpireStep marks, so no step holds the writer long.
	Steps int
	// LongestStep is the longest time one step held the write lock: the
	// worst stall expiry caused a concurrent writer.
	LongestStep time.Duration
	// Duration is the wall time of the whole call.
	Duration time.Duration
}

// Expire drops every window whose newest possible mark is older than
// Options.Retention, by the clock Options.Now. A key whose mark was dropped
// is applied again if it is delivered again: that is the dedup window.
//
// The windows stop answering look-ups at once, in one small transaction;
// their marks are then deleted in steps of Options.ExpireStep marks, each in
// its own transaction, so writers wait at most one step behind expiry. The
// work grows with the number of expired marks, never with the live ones. If
// ctx ends or the process dies midway, the windows stay dropped and the next
// Expire (or the background expiry) finishes deleting them.
//
// A clock that jumps backwards only delays expiry: nothing is dropped
// before its time by the clock's own account. A window holding a claim
// whose lease has not run out is kept until it has, and so are the windows
// after it.
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
	// The earlier of the store's time and the raw reading: a clock stepped
	// back only delays expiry, and a forward jump not yet confirmed (see
	// Options.MaxClockJump) expires nothing.
	store, raw := db.clock.readRaw()
	now := min(store.UnixNano(), raw.UnixNano())
	floor := db.live.Floor()
	for _, w := range db.expirable(now) {
		floor = max(floor, db.windowConfig.End(w.Start))
	}
	if floor > db.live.Floor() {
		// The clock's high-water mark goes with the floor (and is saved
		// again at Close), so a restart on a clock that stepped back
		// resumes from here.
		var high int64
		if err := db.expireTx(st, func(btx *bolt.Tx) error {
			high = db.clock.read().UnixNano()
			return layout.WriteExpiry(btx, layout.Expiry{Floor: floor, ClockHigh: high})
		}, func() {
			db.live.DropBelow(floor)
			db.clockSaved = high // learned under the write lock, as saveClockLocked's
		}); err != nil {
			return err
		}
	}

	// Delete what lies below the floor, including what an interrupted
	// earlier call left.
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
			err := db.expireTx(st, func(btx *bolt.Tx) (err error) {
				deleted, gone, err = layout.ExpireSome(btx, start, db.opts.ExpireStep)
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
	return nil
}

// expireTx runs one expiry transaction under the write lock, then learned
// (if any) before releasing it, and records how long the lock was held.
func (db *DB) expireTx(st *ExpireStats, fn func(btx *bolt.Tx) error, learned func()) error {
	db.writeMu.Lock()
	defer db.writeMu.Unlock() // released on every exit, a panic in fn or learned included
	held := time.Now()
	defer func() {
		st.LongestStep = max(st.LongestStep, time.Since(held))
		st.Steps++
	}()
	err := db.writeLocked(func(w *writeTx) error { return fn(w.btx) })
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

// ExpireDue returns the windows that Expire would drop if it ran now, oldest
// first, and drops nothing: an expiry dry run, for an operator who wants to
// see what a retry would no longer be deduplicated against. It reads the
// clock as Expire does, so its answer is Expire's as long as no mark or
// claim is written in between. It works on a read-only DB.
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

// expirable returns the live windows, oldest first, that have expired at
// now (Unix nanoseconds). Windows go oldest first, and stop at the first
// one to keep, since the floor drops everything below it: a window holding
// a claim whose lease is still running is kept until it ends (and the newer
// ones with it), so a live claim never loses its mark.
func (db *DB) expirable(now int64) []*windowset.Live {
	live := db.live.Windows()
	for i, w := range live {
		if now < db.windowConfig.ExpiresAt(w.Start) || now < w.LeaseEnd.Load() {
			return live[:i]
		}
	}
	return live
}
