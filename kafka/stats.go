package kafka

import "sync/atomic"

// Stats counts what a Consumer did since it was made. Duplicates is the
// article's duplicates_suppressed_total for this consumer: zero under
// at-least-once delivery is suspicious (is the key right?), not good.
type Stats struct {
	Polls          uint64 // polls that returned records
	Records        uint64 // records polled, redeliveries included
	Applied        uint64 // records whose effect committed
	Duplicates     uint64 // records suppressed as duplicates
	GaveUp         uint64 // records given up on (Options.DeadLetter)
	Retries        uint64 // records that failed and will be polled again
	Rewinds        uint64 // partitions set back to a record to poll again
	Commits        uint64 // offset commits that succeeded
	CommitFailures uint64 // offset commits that failed (a rebalance, the broker)
}

// Sub returns s minus old, counter by counter: the activity between two
// calls of Stats.
func (s Stats) Sub(old Stats) Stats {
	return Stats{
		Polls:          s.Polls - old.Polls,
		Records:        s.Records - old.Records,
		Applied:        s.Applied - old.Applied,
		Duplicates:     s.Duplicates - old.Duplicates,
		GaveUp:         s.GaveUp - old.GaveUp,
		Retries:        s.Retries - old.Retries,
		Rewinds:        s.Rewinds - old.Rewinds,
		Commits:        s.Commits - old.Commits,
		CommitFailures: s.CommitFailures - old.CommitFailures,
	}
}

type counters struct {
	polls, records, applied, duplicates, gaveUp, retries, rewinds, commits, commitFailures atomic.Uint64
}

// Stats returns the consumer's counters. It is safe to call while Run
// runs.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Polls:          s.polls.Load(),
		Records:        s.records.Load(),
		Applied:        s.applied.Load(),
		Duplicates:     s.duplicates.Load(),
		GaveUp:         s.gaveUp.Load(),
		Retries:        s.retries.Load(),
		Rewinds:        s.rewinds.Load(),
		Commits:        s.commits.Load(),
		CommitFailures: s.commitFailures.Load(),
	}
}
