package relay

import (
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv/retry"
)

// Stats are a Relay's counters since New, and gauges read now.
type Stats struct {
	Sent            uint64 // sends that succeeded and were acked
	Retried         uint64 // sends of a delivery after the first, allowed by the budget
	Failed          uint64 // sends that returned an error and were nacked
	DeadLettered    uint64 // failed sends whose nack dead-lettered the message
	BudgetExhausted uint64 // retries the budget refused: deferred unsent
	Released        uint64 // received but not sent when Run stopped: deferred unsent
	Fenced          uint64 // acks, nacks and defers refused: the lease was taken over
	Extended        uint64 // heartbeats that extended the lease of a message being sent

	// Backoff is a gauge: the longest delay the latest retry may wait, the
	// policy's ceiling for its attempt or the error's Retry-After (capped
	// by MaxRetryAfter), whichever is longer. Zero before the first
	// failure, and again after the next success.
	Backoff time.Duration
	// OldestPendingAge is a gauge: how long ago the oldest message the
	// workers hold now was first enqueued, zero when they hold none. How
	// far behind the whole outbox is, waiting messages included, is the
	// queue's Stats().OldestAge.
	OldestPendingAge time.Duration
	// Holding is a gauge: how many messages the workers hold now, received
	// and not yet acked, nacked or deferred (with the counters above already
	// moved for every message they let go of).
	Holding int
	// Budget is the retry budget's own stats.
	Budget retry.BudgetStats
}

// Sub returns s minus old: the counters' growth, with s's gauges.
func (s Stats) Sub(old Stats) Stats {
	s.Sent -= old.Sent
	s.Retried -= old.Retried
	s.Failed -= old.Failed
	s.DeadLettered -= old.DeadLettered
	s.BudgetExhausted -= old.BudgetExhausted
	s.Released -= old.Released
	s.Fenced -= old.Fenced
	s.Extended -= old.Extended
	s.Budget = s.Budget.Sub(old.Budget)
	return s
}

type counters struct {
	sent, retried, failed, deadLettered, budgetExhausted, released, fenced, extended atomic.Uint64
	backoff                                                                          atomic.Int64
}

// Stats returns the relay's counters and gauges.
func (r *Relay) Stats() Stats {
	c := &r.c
	s := Stats{Sent: c.sent.Load(), Retried: c.retried.Load(), Failed: c.failed.Load(),
		DeadLettered: c.deadLettered.Load(), BudgetExhausted: c.budgetExhausted.Load(),
		Released: c.released.Load(), Fenced: c.fenced.Load(), Extended: c.extended.Load(),
		Backoff: time.Duration(c.backoff.Load()), Budget: r.opts.Budget.Stats()}
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.mu.held {
		if !at.IsZero() {
			s.Holding++
			s.OldestPendingAge = max(s.OldestPendingAge, now.Sub(at))
		}
	}
	return s
}
