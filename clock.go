package oncekv

import (
	"sync/atomic"
	"time"
)

// monotonicClock is Options.Now made to never go backwards. Clocks step
// back (NTP corrections, a VM restored from a snapshot); a lease that has
// expired must stay expired, or a worker that was taken over could look
// alive again. Expiry alone reads the raw clock, so that a step back only
// delays it and never drops a mark early.
type monotonicClock struct {
	now  func() time.Time
	high atomic.Int64 // the latest reading, Unix nanoseconds
}

// read returns the later of the clock's reading and every earlier one.
func (c *monotonicClock) read() time.Time {
	t := c.now()
	n := t.UnixNano()
	for {
		high := c.high.Load()
		if n <= high {
			return time.Unix(0, high)
		}
		if c.high.CompareAndSwap(high, n) {
			return t
		}
	}
}

// atLeast raises the clock's floor to n, for what the file proves was
// already seen (the newest window) when a store is reopened.
func (c *monotonicClock) atLeast(n int64) {
	for {
		high := c.high.Load()
		if n <= high || c.high.CompareAndSwap(high, n) {
			return
		}
	}
}
