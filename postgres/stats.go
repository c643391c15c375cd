package postgres

import "sync/atomic"

// outcome classifies a request's end for the counters.
type outcome uint8

const (
	outcomeNone outcome = iota
	outcomeApplied
	outcomeDuplicate
	outcomeKeyReuse
	outcomeInProgress
	outcomeFailedRecorded
	outcomeFailedReplayed
	outcomeEffectError
	outcomeInvalid
	outcomeAborted
	outcomeFenced
	outcomeCount // keep last
)

// counters are the Store's counts of outcomes since Open.
type counters struct {
	n              [outcomeCount]atomic.Uint64
	expiredWindows atomic.Uint64
	fencedWrites   atomic.Uint64
}

func (c *counters) count(k outcome) { c.n[k].Add(1) }
