package oncetest

import (
	"time"

	"github.com/oncekv/oncekv/internal/fakeclock"
)

// Timers is a fake clock with timers on it; see fakeclock.Timers.
type Timers = fakeclock.Timers

// NewTimers returns a fake clock stopped at start, with no timers.
func NewTimers(start time.Time) *Timers { return fakeclock.NewTimers(start) }
