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
	outcomeProbeApplied // a takeover's probe answered OutcomeApplied: recorded DONE
	outcomeParked       // a takeover's probe answered OutcomeUnknown: parked
	outcomeParkRefused  // OutcomeUnknown at Options.MaxParked: ErrParkFull
	outcomeParkedAnswer // a request of a parked key: ErrParked
	outcomeCount        // keep last
)

// counters are the Store's counts of outcomes since Open.
type counters struct {
	n              [outcomeCount]atomic.Uint64
	expiredWindows atomic.Uint64
	fencedWrites   atomic.Uint64
	takeovers      atomic.Uint64
	tombDuplicates atomic.Uint64
}

func (c *counters) count(k outcome) { c.n[k].Add(1) }

// Stats are the Store's counts since Open, of this process only (each
// host counts its own), for exporters and dashboards: a plain struct, as
// the embedded store's Stats.
type Stats struct {
	Applied        uint64 // effects committed with their mark (Apply, ApplyBatch, Complete)
	Duplicates     uint64 // requests answered from a DONE mark; zero is suspicious, not good
	KeyReuse       uint64 // ErrKeyReuse
	InProgress     uint64 // ErrInProgress: a live claim, or a key another transaction held
	FailedRecorded uint64 // permanent failures recorded FAILED
	FailedReplayed uint64 // duplicates answered with a recorded failure
	EffectErrors   uint64 // effects (and Complete's) that failed, nothing recorded
	Invalid        uint64 // bad input, nothing written
	Aborted        uint64 // ctx done, a lost connection, a database error
	Fenced         uint64 // claim operations of a holder that was taken over
	FencedWrites   uint64 // AdvanceFence calls refused
	ExpiredWindows uint64 // partitions this Store's Expire dropped
	Takeovers      uint64 // claims that took a key over from an attempt that recorded no outcome
	ProbeApplied   uint64 // takeovers whose probe answered OutcomeApplied: recorded DONE, nothing run
	Parked         uint64 // keys parked: a probe answered OutcomeUnknown
	ParkRefused    uint64 // OutcomeUnknown with Options.MaxParked keys parked already (ErrParkFull)
	ParkedAnswers  uint64 // requests answered with oncekv.ErrParked
	// TombstoneDuplicates counts the duplicates, in Duplicates or
	// FailedReplayed too, answered from a tombstone: their stored response
	// had expired (oncekv.Result.ResponseExpired).
	TombstoneDuplicates uint64
}

// Stats returns the Store's counts since Open.
func (s *Store) Stats() Stats {
	n := func(k outcome) uint64 { return s.stats.n[k].Load() }
	return Stats{
		Applied: n(outcomeApplied), Duplicates: n(outcomeDuplicate), KeyReuse: n(outcomeKeyReuse),
		InProgress: n(outcomeInProgress), FailedRecorded: n(outcomeFailedRecorded), FailedReplayed: n(outcomeFailedReplayed),
		EffectErrors: n(outcomeEffectError), Invalid: n(outcomeInvalid), Aborted: n(outcomeAborted), Fenced: n(outcomeFenced),
		FencedWrites: s.stats.fencedWrites.Load(), ExpiredWindows: s.stats.expiredWindows.Load(),
		Takeovers: s.stats.takeovers.Load(), ProbeApplied: n(outcomeProbeApplied), Parked: n(outcomeParked),
		ParkRefused: n(outcomeParkRefused), ParkedAnswers: n(outcomeParkedAnswer),
		TombstoneDuplicates: s.stats.tombDuplicates.Load(),
	}
}

// Sub returns the counts of s since old, for rates over an interval.
func (s Stats) Sub(old Stats) Stats {
	return Stats{
		Applied: s.Applied - old.Applied, Duplicates: s.Duplicates - old.Duplicates, KeyReuse: s.KeyReuse - old.KeyReuse,
		InProgress: s.InProgress - old.InProgress, FailedRecorded: s.FailedRecorded - old.FailedRecorded,
		FailedReplayed: s.FailedReplayed - old.FailedReplayed, EffectErrors: s.EffectErrors - old.EffectErrors,
		Invalid: s.Invalid - old.Invalid, Aborted: s.Aborted - old.Aborted, Fenced: s.Fenced - old.Fenced,
		FencedWrites: s.FencedWrites - old.FencedWrites, ExpiredWindows: s.ExpiredWindows - old.ExpiredWindows,
		Takeovers: s.Takeovers - old.Takeovers, ProbeApplied: s.ProbeApplied - old.ProbeApplied, Parked: s.Parked - old.Parked,
		ParkRefused: s.ParkRefused - old.ParkRefused, ParkedAnswers: s.ParkedAnswers - old.ParkedAnswers,
		TombstoneDuplicates: s.TombstoneDuplicates - old.TombstoneDuplicates,
	}
}
