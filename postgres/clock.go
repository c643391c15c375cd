package postgres

import (
	"sync"
	"time"
)

// resyncEvery is how long the store reads the database's time on the
// local monotonic clock before measuring it again. Local clocks drift by
// parts per million, so a minute keeps the hosts within microseconds of
// each other: far below any lease.
const resyncEvery = time.Minute

// clock is the store's time: Options.Now when injected, else the
// database's clock as last measured plus the local monotonic time elapsed
// since. It never goes backwards: a reading below the highest one seen
// (or saved in the schema by any host) reads as that one.
type clock struct {
	inject func() time.Time // Options.Now; nil for the database's

	mu struct {
		sync.Mutex
		high   int64     // the highest time handed out, Unix nanoseconds
		dbAt   time.Time // the database's time at the last measure
		local  time.Time // the local time (with its monotonic reading) then
		synced bool
	}
}

// now returns the store's time.
func (c *clock) now() time.Time {
	var t time.Time
	if c.inject != nil {
		t = c.inject()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inject == nil {
		t = c.mu.dbAt.Add(time.Since(c.mu.local))
	}
	if n := t.UnixNano(); n > c.mu.high {
		c.mu.high = n
		return t
	}
	return time.Unix(0, c.mu.high)
}

// stale reports whether the database's time should be measured again
// (never with an injected clock).
func (c *clock) stale() bool {
	if c.inject != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.mu.synced || time.Since(c.mu.local) >= resyncEvery
}

// measured records that the database's clock read dbAt at local, a time
// taken just before the query returned.
func (c *clock) measured(dbAt, local time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.dbAt, c.mu.local, c.mu.synced = dbAt, local, true
}

// atLeast raises the clock's floor to high, Unix nanoseconds: the highest
// time a host saved in the schema.
func (c *clock) atLeast(high int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.high = max(c.mu.high, high)
}

// highest returns the highest time handed out, Unix nanoseconds.
func (c *clock) highest() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.high
}
