// Package windowset is the store's in-memory view of its live time windows:
// for each, its start, its mark count, its latest lease end and its Bloom
// filter, published so that readers never block. The window arithmetic it
// places marks with is package window.
package windowset

import (
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/window"
)

// Live is one live window as the process sees it: where its marks are, how
// many there are, and the filter that may rule a key out of it.
type Live struct {
	// Start is the window's start, Unix nanoseconds.
	Start int64
	// Filter answers "definitely not in this window"; nil means no filter,
	// so every look-up must read the window.
	Filter *bloom.Filter
	// Marks is the number of marks in the window.
	Marks atomic.Int64
	// LeaseEnd is the latest end of a lease of a claim written in the
	// window, Unix nanoseconds: the window is kept at least until then.
	LeaseEnd atomic.Int64
}

// Set is the list of live windows, oldest first. Readers take a snapshot
// with one atomic load and never block; writers (one at a time, under the
// store's write lock) publish a new list. A snapshot may be a little stale:
// callers treat what it lacks as "look it up exactly".
type Set struct {
	list atomic.Pointer[[]*Live]
	// floor is the start below which every window has expired: a window
	// below it is ignored by look-ups and never receives a mark again.
	floor atomic.Int64
}

// NewSet returns a set holding windows (oldest first) and the expiry floor.
func NewSet(windows []*Live, floor int64) *Set {
	s := &Set{}
	s.list.Store(&windows)
	s.floor.Store(floor)
	return s
}

// Windows returns the live windows, oldest first. The slice must not be
// modified.
func (s *Set) Windows() []*Live { return *s.list.Load() }

// Floor returns the expiry floor.
func (s *Set) Floor() int64 { return s.floor.Load() }

// Newest returns the newest window, or nil when there is none.
func (s *Set) Newest() *Live {
	l := s.Windows()
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1]
}

// Find returns the window starting at start, or nil.
func (s *Set) Find(start int64) *Live {
	l := s.Windows()
	for i := len(l) - 1; i >= 0; i-- {
		if l[i].Start == start {
			return l[i]
		}
	}
	return nil
}

// Add publishes w, keeping the list in time order. The caller serializes
// writers.
func (s *Set) Add(w *Live) {
	old := s.Windows()
	l := make([]*Live, 0, len(old)+1)
	i := 0
	for ; i < len(old) && old[i].Start < w.Start; i++ {
		l = append(l, old[i])
	}
	l = append(l, w)
	l = append(l, old[i:]...)
	s.list.Store(&l)
}

// DropBelow raises the floor to floor and removes every window starting
// below it, returning them. The caller serializes writers.
func (s *Set) DropBelow(floor int64) []*Live {
	if floor <= s.Floor() {
		return nil
	}
	s.floor.Store(floor)
	old := s.Windows()
	i := 0
	for i < len(old) && old[i].Start < floor {
		i++
	}
	kept := append([]*Live(nil), old[i:]...)
	s.list.Store(&kept)
	return old[:i]
}

// Place returns the start of the window of c for a mark first seen at now
// (Unix nanoseconds). Time may go
// backwards (NTP steps, a VM restored from a snapshot, a fake clock in a
// test), so the mark goes no earlier than the newest window and never below
// the expiry floor: a new mark must never land in a window that has sealed
// its filter or already expired.
func (s *Set) Place(c window.Config, now int64) int64 {
	start := c.Start(time.Unix(0, now))
	if n := s.Newest(); n != nil && n.Start > start {
		start = n.Start
	}
	if f := s.Floor(); f > start {
		start = c.Start(time.Unix(0, f))
		if start < f {
			start += int64(c.Span)
		}
	}
	return start
}
