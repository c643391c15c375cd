// Package fakeclock is a clock that moves only when told, with timers on
// it, for tests and for kvdemo's stories: one value drives the store's
// Options.Now and the queue's Options.Timer, so backoffs, leases and
// budgets play out without sleeping.
package fakeclock

import (
	"sync"
	"time"
)

// Timers is a fake clock that also makes timers on it, for queue.Options
// .Timer next to oncekv.Options.Now: Advance fires every timer whose time
// has come, so a test drives backoffs and leases without sleeping.
type Timers struct {
	mu      sync.Mutex
	now     time.Time
	pending []pendingTimer
}

type pendingTimer struct {
	at time.Time
	c  chan time.Time
}

// NewTimers returns a clock stopped at start, with no timers.
func NewTimers(start time.Time) *Timers { return &Timers{now: start} }

// Now returns the clock's time; pass the method value as Options.Now.
func (f *Timers) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Timer has the signature of queue.Options.Timer: a channel that receives
// once the clock has moved d on, and a stop function.
func (f *Timers) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(chan time.Time, 1)
	if d <= 0 {
		c <- f.now // due already, as time.NewTimer(0) is
		return c, func() bool { return false }
	}
	f.pending = append(f.pending, pendingTimer{at: f.now.Add(d), c: c})
	return c, func() bool { return f.stop(c) }
}

// stop forgets the timer of c, so that waits that ended early do not pile
// up while the clock stands still; it reports whether c had not fired.
func (f *Timers) stop(c chan time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range f.pending {
		if p.c == c {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock by d and fires the timers that are due.
func (f *Timers) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	now := f.now
	kept := f.pending[:0]
	for _, p := range f.pending {
		if p.at.After(now) {
			kept = append(kept, p)
			continue
		}
		p.c <- now
	}
	f.pending = kept
}
