package relay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/oncekv/oncekv/retry"
)

// Defaults of Options' fields.
const (
	DefaultWorkers     = 4
	DefaultGrace       = 10 * time.Second
	DefaultSendTimeout = 10 * time.Second
	// MaxWorkers bounds Options.Workers: each worker is a goroutine with a
	// message leased.
	MaxWorkers = 1024
)

// Options configures a Relay. Pass nil to New for all defaults; a zero
// field takes its default. New works on a copy.
type Options struct {
	// Workers is how many messages are sent at once. Default 4; at most
	// MaxWorkers.
	Workers int

	// Budget limits retries to a share of first attempts (see
	// retry.Budget). Default nil: a budget with retry's defaults (10% of
	// the first attempts of the last 10s, plus 1 retry per second) on
	// Options.Now. Share one among relays that call the same far side.
	Budget *retry.Budget

	// Grace is how long sends in flight may run on once Run's ctx is
	// done, before their context is cancelled. Default 10s; negative:
	// cancel them at once.
	Grace time.Duration

	// SendTimeout bounds one call of send. Default 10s; negative: no
	// bound. With heartbeats it may outlast the queue's Visibility; without
	// them (Heartbeat negative) New refuses one that is not positive and
	// shorter than the Visibility, since a send that outlives its lease
	// would be sent again, at the same time, by another worker.
	SendTimeout time.Duration

	// Heartbeat is how often the lease of a message being sent is
	// extended, by the queue's Visibility from then, on the queue's clock
	// (its Options.Timer): a slow send keeps its message, and no other
	// worker sends it meanwhile. If the lease is lost (taken over) or
	// cannot be extended before it ends, the send's context is cancelled.
	// Default: the queue's Visibility/3; it must be shorter than the
	// Visibility. Negative: no heartbeat.
	Heartbeat time.Duration

	// Now is the clock of the default Budget and of Stats' ages. Default:
	// the store's clock (the queue's DB().Now), so that a clock injected
	// into the store (oncekv.Options.Now) drives the relay too.
	Now func() time.Time

	// Rand is the random source of the wait of a retry the budget
	// refused. Default: the runtime's generator. Tests seed one.
	Rand rand.Source
}

func (o *Options) withDefaults(visibility time.Duration) (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	var errs []error
	if c.Heartbeat == 0 {
		c.Heartbeat = visibility / 3
	}
	switch {
	case c.Heartbeat > 0 && c.Heartbeat >= visibility:
		errs = append(errs, fmt.Errorf("heartbeat %v (Heartbeat): the queue's Visibility %v ends before the first beat", c.Heartbeat, visibility))
	case c.Heartbeat < 0 && (c.SendTimeout < 0 || c.SendTimeout >= visibility || c.SendTimeout == 0 && DefaultSendTimeout >= visibility):
		errs = append(errs, fmt.Errorf("send timeout %v (SendTimeout) without heartbeats: a send may outlive the queue's Visibility %v, "+
			"and be sent again at the same time; give a shorter SendTimeout, or a Heartbeat", c.SendTimeout, visibility))
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Workers < 0 || c.Workers > MaxWorkers {
		errs = append(errs, fmt.Errorf("Options.Workers = %d: want 1 to %d (zero means the default)", c.Workers, MaxWorkers))
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Budget == nil && len(errs) == 0 {
		b, err := retry.NewBudget(&retry.BudgetOptions{Now: c.Now})
		if err != nil {
			errs = append(errs, err)
		}
		c.Budget = b
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return c, nil
}
