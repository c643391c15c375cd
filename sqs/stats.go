package sqs

import "sync/atomic"

// Stats counts what a Consumer did since it was made. Duplicates is the
// article's duplicates_suppressed_total for this consumer: zero under
// at-least-once delivery is suspicious, not good.
type Stats struct {
	Receives           uint64 // receives that returned messages
	Messages           uint64 // messages received, redeliveries included
	Applied            uint64 // messages whose effect committed
	Duplicates         uint64 // messages suppressed as duplicates
	GaveUp             uint64 // messages left to the redrive policy
	Retries            uint64 // messages made visible again after a backoff
	Deleted            uint64 // messages deleted
	DeleteFailures     uint64 // messages whose delete failed (they come back as duplicates)
	VisibilityChanges  uint64 // heartbeat extensions and retry delays set
	VisibilityFailures uint64 // of those, the ones that failed
}

// Sub returns s minus old, counter by counter.
func (s Stats) Sub(old Stats) Stats {
	return Stats{
		Receives:           s.Receives - old.Receives,
		Messages:           s.Messages - old.Messages,
		Applied:            s.Applied - old.Applied,
		Duplicates:         s.Duplicates - old.Duplicates,
		GaveUp:             s.GaveUp - old.GaveUp,
		Retries:            s.Retries - old.Retries,
		Deleted:            s.Deleted - old.Deleted,
		DeleteFailures:     s.DeleteFailures - old.DeleteFailures,
		VisibilityChanges:  s.VisibilityChanges - old.VisibilityChanges,
		VisibilityFailures: s.VisibilityFailures - old.VisibilityFailures,
	}
}

type counters struct {
	receives, messages, applied, duplicates, gaveUp, retries, deleted, deleteFailures, visibilityChanges, visibilityFailures atomic.Uint64
}

// Stats returns the consumer's counters; safe while Run runs.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Receives:           s.receives.Load(),
		Messages:           s.messages.Load(),
		Applied:            s.applied.Load(),
		Duplicates:         s.duplicates.Load(),
		GaveUp:             s.gaveUp.Load(),
		Retries:            s.retries.Load(),
		Deleted:            s.deleted.Load(),
		DeleteFailures:     s.deleteFailures.Load(),
		VisibilityChanges:  s.visibilityChanges.Load(),
		VisibilityFailures: s.visibilityFailures.Load(),
	}
}
