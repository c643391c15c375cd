package oncekv

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv/internal/layout"
)

// clockConfirmReadings is how many readings in a row must agree on a forward
// jump over Options.MaxClockJump before the store takes it.
const clockConfirmReadings = 3

// clockSaveEvery is how far the store's clock must move before a write
// transaction saves it again (saveClockLocked).
const clockSaveEvery = time.Second

// monotonicClock is Options.Now made never to go backwards, taking a forward
// jump over maxJump only once confirmed (docs/design/clock.md).
type monotonicClock struct {
	now     func() time.Time
	maxJump int64 // Options.MaxClockJump in nanoseconds; <= 0: unbounded
	high    atomic.Int64
	// settled is false until the first reading, Open's anchor, taken as is.
	settled atomic.Bool
	// anchorOnly is true while Open's anchor is the only reading: nothing
	// acted on it, so Close need not save it.
	anchorOnly atomic.Bool
	// jumps counts the forward jumps held back (Stats.ClockJumps).
	jumps atomic.Uint64
	// pending is set while a jump waits, so the common reading takes no lock.
	pending atomic.Bool
	// warn logs a held-back jump; nil in tests of the clock alone.
	warn func(reading, high time.Time)

	mu struct {
		sync.Mutex
		pending int64 // the first reading of a held-back jump, Unix nanoseconds
		agreed  int   // readings that agreed with it so far; 0: no jump pending
	}
}

// read returns the store's time: the latest reading so far, except a
// forward jump not yet confirmed, during which the time before it.
func (c *monotonicClock) read() time.Time {
	t, _ := c.readRaw()
	return t
}

// last returns the store's time as of its latest reading (or what the
// file proved at Open, see atLeast), without reading the clock again.
func (c *monotonicClock) last() time.Time { return time.Unix(0, c.high.Load()) }

// anchor takes Open's reading, from which MaxClockJump holds for the first
// call's reading too.
func (c *monotonicClock) anchor() {
	c.read()
	c.anchorOnly.Store(true)
}

// readRaw is read that also returns the raw reading it was made from.
func (c *monotonicClock) readRaw() (store, raw time.Time) {
	if c.anchorOnly.Load() {
		c.anchorOnly.Store(false)
	}
	raw = c.now()
	n := raw.UnixNano()
	first := !c.settled.Load()
	if first {
		c.settled.Store(true)
	}
	for {
		high := c.high.Load()
		jump := !first && c.maxJump > 0 && n-high > c.maxJump
		if !jump && c.pending.Load() {
			c.settle() // back in range: the jump was a glitch
		}
		switch {
		case n <= high:
			return time.Unix(0, high), raw
		case jump && !c.confirm(n, high):
			return time.Unix(0, high), raw
		case jump:
			// Confirmed: taken whatever another reader did meanwhile.
			c.atLeast(n)
			return time.Unix(0, max(n, c.high.Load())), raw
		case c.high.CompareAndSwap(high, n):
			return raw, raw
		}
	}
}

// confirm records n, a reading more than maxJump ahead of high, and
// reports whether enough readings in a row now agree on it.
func (c *monotonicClock) confirm(n, high int64) bool {
	c.mu.Lock()
	fresh := c.mu.agreed == 0 || n < c.mu.pending-c.maxJump || n > c.mu.pending+c.maxJump
	if fresh {
		c.mu.pending, c.mu.agreed = n, 0
	}
	c.mu.agreed++
	ok := c.mu.agreed >= clockConfirmReadings
	if ok {
		c.mu.agreed = 0
	}
	c.pending.Store(!ok)
	c.mu.Unlock()
	if fresh {
		c.jumps.Add(1)
		if c.warn != nil {
			c.warn(time.Unix(0, n), time.Unix(0, high))
		}
	}
	return ok
}

// settle ends a pending jump.
func (c *monotonicClock) settle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.agreed = 0
	c.pending.Store(false)
}

// atLeast raises the clock to n, what the file proves was seen, at Open.
func (c *monotonicClock) atLeast(n int64) {
	for {
		high := c.high.Load()
		if n <= high || c.high.CompareAndSwap(high, n) {
			return
		}
	}
}

// Now returns the store's clock: Options.Now, never going backwards. Leases,
// windows and InProgressError.RetryAfter go by it, so packages built on the
// store should take their time here too. It works after Close too.
func (db *DB) Now() time.Time { return db.clock.read() }

// saveClockLocked saves the store's clock in w, a write transaction about
// to run, once it has moved clockSaveEvery since last saved.
func (db *DB) saveClockLocked(w *writeTx) error {
	now := w.now.UnixNano()
	if db.clockSaved > now-int64(clockSaveEvery) {
		return nil
	}
	w.clockSaved = true
	return layout.WriteExpiry(w.btx, layout.Expiry{Floor: db.live.Floor(), ClockHigh: now})
}
