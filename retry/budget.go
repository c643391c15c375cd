package retry

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"time"
)

// Defaults of BudgetOptions' fields; doc.go argues for each.
const (
	DefaultBudgetWindow       = 10 * time.Second
	DefaultBudgetRatio        = 0.1
	DefaultBudgetMinPerSecond = 1.0
)

// budgetSlots is how many slots the sliding window is cut into: the window
// slides one slot (a tenth of it) at a time.
const budgetSlots = 10

// tokenScale turns fractional retry allowances into integers, so that
// "100 first attempts at 10% allow 10 retries" holds exactly, with no
// floating-point residue at the boundary.
const tokenScale = 1_000_000

// BudgetOptions configures a Budget. Pass nil to NewBudget for all
// defaults; a zero field takes its default.
type BudgetOptions struct {
	// Window is how far back first attempts and retries are counted.
	// Default 10s. It slides by a tenth of itself at a time. Must be at
	// least 100ms: a shorter window sees too few requests to hold a ratio.
	Window time.Duration

	// Ratio is the share of first attempts that may be retried within the
	// window: 0.1 allows one retry per ten first attempts. Default 0.1 (the
	// 10% of Google's SRE book and Envoy's retry budget). Must be in (0, 1].
	Ratio float64

	// MinPerSecond is the floor: retries per second allowed on top of the
	// ratio, averaged over the window, so a caller with little traffic can
	// still retry at all. Default 1; negative means no floor.
	MinPerSecond float64

	// Now is the clock. Default time.Now. Tests inject a fake one.
	Now func() time.Time
}

// Budget limits retries to a share of recent first attempts, the way
// Finagle's RetryBudget and gRPC's retry throttling do, so that when the
// far side is down the retries do not multiply the load on it. TryRetry
// allows a retry only if, counting it, the retries in the trailing window
// (the current tenth of Window and the nine before it) stay at most
// Ratio × the first attempts counted there, plus MinPerSecond × Window.
// Under an outage with a steady rate of first attempts, every
// window-aligned stretch of time therefore sees at most first attempts ×
// (1 + Ratio) + MinPerSecond × Window requests to the far side; a burst
// of first attempts that then stops lends its retries for one more window
// at most.
//
// Record each first attempt with Attempt, and ask TryRetry before each
// retry. A Budget is safe for concurrent use and reads time only from its
// clock. A clock that steps back counts into the newest slot seen, so it
// neither reopens slots that left the window nor drops live ones.
type Budget struct {
	slot  time.Duration // Window / budgetSlots
	ratio uint64        // Ratio × tokenScale
	floor uint64        // MinPerSecond × Window in seconds × tokenScale
	now   func() time.Time
	start time.Time // slot numbers count from here
	mu    struct {
		sync.Mutex
		latest int64 // the highest slot number seen
		slots  [budgetSlots]budgetSlot
		stats  BudgetStats
	}
}

type budgetSlot struct {
	n           int64 // slot number; a stale one is reset on use
	deposits    uint64
	withdrawals uint64
}

// BudgetStats are a Budget's counters since it was made.
type BudgetStats struct {
	Deposits    uint64 // first attempts recorded
	Withdrawals uint64 // retries allowed
	Refused     uint64 // retries refused
	// Available is how many retries the budget would allow right now. It
	// is a gauge: Sub keeps the newer value.
	Available uint64
}

// Sub returns the counters' growth since old, for rates over an interval.
func (s BudgetStats) Sub(old BudgetStats) BudgetStats {
	return BudgetStats{
		Deposits:    s.Deposits - old.Deposits,
		Withdrawals: s.Withdrawals - old.Withdrawals,
		Refused:     s.Refused - old.Refused,
		Available:   s.Available,
	}
}

// NewBudget returns a budget for o (nil: every default). It fails with an
// error matching ErrInvalidBudget that lists every bad field.
func NewBudget(o *BudgetOptions) (*Budget, error) {
	var c BudgetOptions
	if o != nil {
		c = *o
	}
	// cmp.Or keeps a NaN Ratio or MinPerSecond (NaN is not zero), so
	// validate reports it.
	c.Window = cmp.Or(c.Window, DefaultBudgetWindow)
	c.Ratio = cmp.Or(c.Ratio, DefaultBudgetRatio)
	c.MinPerSecond = cmp.Or(c.MinPerSecond, DefaultBudgetMinPerSecond)
	if c.Now == nil {
		c.Now = time.Now
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	b := &Budget{
		slot:  c.Window / budgetSlots,
		ratio: uint64(math.Round(c.Ratio * tokenScale)),
		now:   c.Now,
	}
	if c.MinPerSecond > 0 {
		b.floor = uint64(math.Round(c.MinPerSecond * c.Window.Seconds() * tokenScale))
	}
	b.start = b.now()
	return b, nil
}

// maxBudgetFloor keeps MinPerSecond × Window × tokenScale within a uint64.
const maxBudgetFloor = 1e12

func (o *BudgetOptions) validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidBudget, field, value, why))
	}
	if o.Window < 100*time.Millisecond {
		bad("Window", o.Window, "must be at least 100ms (zero means the default)")
	}
	if r := o.Ratio; !(r > 0 && r <= 1) {
		bad("Ratio", r, "must be in (0, 1] (zero means the default)")
	}
	if m := o.MinPerSecond; math.IsNaN(m) || math.IsInf(m, 0) {
		bad("MinPerSecond", m, "must be a number (negative means no floor)")
	} else if m*o.Window.Seconds() > maxBudgetFloor {
		bad("MinPerSecond", m, "times Window must be at most 1e12 retries")
	}
	return errors.Join(errs...)
}

// Attempt records one first attempt (a new request, a message's first
// delivery): it adds Ratio of a retry to the budget for one Window.
func (b *Budget) Attempt() {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.slotLocked(now).deposits++
	b.mu.stats.Deposits++
}

// TryRetry spends one retry if the budget allows it, and reports whether it
// did. A refused retry is not sent: the caller waits, or fails the call.
func (b *Budget) TryRetry() bool {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.slotLocked(now)
	if b.availableLocked() == 0 {
		b.mu.stats.Refused++
		return false
	}
	s.withdrawals++
	b.mu.stats.Withdrawals++
	return true
}

// Stats returns the budget's counters and how many retries it allows now.
func (b *Budget) Stats() BudgetStats {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.slotLocked(now)
	s := b.mu.stats
	s.Available = b.availableLocked()
	return s
}

// slotLocked moves the window to now and returns now's slot.
func (b *Budget) slotLocked(now time.Time) *budgetSlot {
	n := max(int64(now.Sub(b.start)/b.slot), b.mu.latest)
	b.mu.latest = n
	s := &b.mu.slots[n%budgetSlots]
	if s.n != n {
		*s = budgetSlot{n: n}
	}
	return s
}

// availableLocked is how many whole retries the window allows now:
// Ratio × deposits + floor − withdrawals, on integers scaled by tokenScale.
// Call it right after slotLocked, so every slot outside the window has a
// stale number.
func (b *Budget) availableLocked() uint64 {
	var deposits, withdrawals uint64
	for _, s := range b.mu.slots {
		if s.n > b.mu.latest-budgetSlots {
			deposits += s.deposits
			withdrawals += s.withdrawals
		}
	}
	hi, allowed := bits.Mul64(deposits, b.ratio)
	if hi != 0 {
		allowed = math.MaxUint64
	}
	allowed, carry := bits.Add64(allowed, b.floor, 0)
	if carry != 0 {
		allowed = math.MaxUint64
	}
	allowed /= tokenScale
	if allowed <= withdrawals {
		return 0
	}
	return allowed - withdrawals
}
