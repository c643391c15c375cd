package oncekv

import (
	"time"

	"github.com/oncekv/oncekv/internal/windows"
)

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
			End:   time.Unix(0, db.window.End(w.Start)),
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
func (db *DB) expirable(now int64) []*windows.Live {
	live := db.windows.Windows()
	for i, w := range live {
		if now < db.window.ExpiresAt(w.Start) || now < w.LeaseEnd.Load() {
			return live[:i]
		}
	}
	return live
}
