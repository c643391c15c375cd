package oncekv

import "time"

// Sync flushes the file to disk (bbolt's Sync: fdatasync). With
// Options.NoSync, commits skip it, and Sync is how a program makes what it
// has committed so far durable, at a point of its choosing (before it
// acknowledges a batch to a broker, say). Without NoSync every commit is
// durable already and Sync costs one more flush for nothing.
//
// Errors: ErrClosed after Close, and the file system's error.
func (db *DB) Sync() error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	if db.opts.ReadOnly {
		return nil // nothing of this process's to flush
	}
	return db.bolt.Sync()
}

// Now returns the store's clock: Options.Now, never going backwards (a
// reading is never earlier than one before it). Leases, windows and
// InProgressError.RetryAfter are all by this clock, so a package built on
// the store (a queue, an HTTP middleware) should take its time here too,
// and one injected Options.Now then drives everything. It works after
// Close too.
func (db *DB) Now() time.Time { return db.clock.read() }
