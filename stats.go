package oncekv

import (
	"sync"
	"sync/atomic"
	"time"
)

// Counters are the per-handler counters of SPEC section 9.
type Counters struct {
	// Applied counts effects committed with a DONE mark.
	Applied uint64
	// DuplicatesSuppressed counts requests answered from a stored mark
	// without running the effect (duplicates_suppressed_total). Zero over a
	// long time is suspicious, not good: at-least-once delivery does
	// redeliver.
	DuplicatesSuppressed uint64
	// InProgressConflicts counts ErrInProgress answers
	// (idempotency_key_conflicts_total).
	InProgressConflicts uint64
	// KeyReuses counts ErrKeyReuse answers.
	KeyReuses uint64
	// FailedRecorded counts permanent failures recorded as FAILED.
	FailedRecorded uint64
	// FailedReplayed counts duplicates answered with a recorded failure.
	FailedReplayed uint64
	// EffectErrors counts transient effect errors (rolled back, nothing
	// recorded).
	EffectErrors uint64
	// InvalidRequests counts requests rejected as bad input.
	InvalidRequests uint64
	// Aborted counts requests that applied nothing because their context
	// ended, the commit failed or a record did not decode.
	Aborted uint64
	// Fenced counts claim operations (Extend, Complete, Fail) rejected with
	// ErrFenced because another worker had taken the key over.
	Fenced uint64
}

// Sub returns c - other, for the change between two snapshots.
func (c Counters) Sub(other Counters) Counters {
	return Counters{
		Applied:              c.Applied - other.Applied,
		DuplicatesSuppressed: c.DuplicatesSuppressed - other.DuplicatesSuppressed,
		InProgressConflicts:  c.InProgressConflicts - other.InProgressConflicts,
		KeyReuses:            c.KeyReuses - other.KeyReuses,
		FailedRecorded:       c.FailedRecorded - other.FailedRecorded,
		FailedReplayed:       c.FailedReplayed - other.FailedReplayed,
		EffectErrors:         c.EffectErrors - other.EffectErrors,
		InvalidRequests:      c.InvalidRequests - other.InvalidRequests,
		Aborted:              c.Aborted - other.Aborted,
		Fenced:               c.Fenced - other.Fenced,
	}
}

func (c *Counters) add(o Counters) {
	c.Applied += o.Applied
	c.DuplicatesSuppressed += o.DuplicatesSuppressed
	c.InProgressConflicts += o.InProgressConflicts
	c.KeyReuses += o.KeyReuses
	c.FailedRecorded += o.FailedRecorded
	c.FailedReplayed += o.FailedReplayed
	c.EffectErrors += o.EffectErrors
	c.InvalidRequests += o.InvalidRequests
	c.Aborted += o.Aborted
	c.Fenced += o.Fenced
}

// Stats is a snapshot of a DB's counters and gauges. Take two and Sub them
// for rates; an exporter (Prometheus, expvar) can adapt it without oncekv
// depending on a metrics library.
type Stats struct {
	// Total sums Handlers.
	Total Counters
	// Handlers holds the counters of every handler seen since Open.
	Handlers map[string]Counters
	// Commits counts write transactions committed (Apply groups, batches,
	// Update). Total.Applied / Commits is the average group size.
	Commits uint64
	// FencedWrites counts PutFenced and version-checked writes rejected
	// with ErrFenced.
	FencedWrites uint64
}

// Sub returns s - other: counters of the interval between two snapshots.
func (s Stats) Sub(other Stats) Stats {
	d := Stats{
		Total:        s.Total.Sub(other.Total),
		Handlers:     make(map[string]Counters, len(s.Handlers)),
		Commits:      s.Commits - other.Commits,
		FencedWrites: s.FencedWrites - other.FencedWrites,
	}
	for h, c := range s.Handlers {
		d.Handlers[h] = c.Sub(other.Handlers[h])
	}
	return d
}

// Stats returns a snapshot of the counters since Open.
func (db *DB) Stats() Stats {
	return db.stats.snapshot()
}

// statsCollector keeps one set of atomic counters per handler. Handlers are
// operation names, few and fixed, so a map of them stays small.
type statsCollector struct {
	handlers     sync.Map // string -> *handlerCounters
	commits      atomic.Uint64
	fencedWrites atomic.Uint64
}

type handlerCounters [outcomeCount]atomic.Uint64

func (s *statsCollector) count(handler string, kind outcome) {
	if kind == outcomeNone {
		return
	}
	v, ok := s.handlers.Load(handler)
	if !ok {
		v, _ = s.handlers.LoadOrStore(handler, new(handlerCounters))
	}
	v.(*handlerCounters)[kind].Add(1)
}

func (s *statsCollector) snapshot() Stats {
	st := Stats{Handlers: map[string]Counters{}, Commits: s.commits.Load(), FencedWrites: s.fencedWrites.Load()}
	s.handlers.Range(func(k, v any) bool {
		h := v.(*handlerCounters)
		c := Counters{
			Applied:              h[outcomeApplied].Load(),
			DuplicatesSuppressed: h[outcomeDuplicate].Load(),
			InProgressConflicts:  h[outcomeInProgress].Load(),
			KeyReuses:            h[outcomeKeyReuse].Load(),
			FailedRecorded:       h[outcomeFailedRecorded].Load(),
			FailedReplayed:       h[outcomeFailedReplayed].Load(),
			EffectErrors:         h[outcomeEffectError].Load(),
			InvalidRequests:      h[outcomeInvalid].Load(),
			Aborted:              h[outcomeAborted].Load(),
			Fenced:               h[outcomeFenced].Load(),
		}
		st.Handlers[k.(string)] = c
		st.Total.add(c)
		return true
	})
	return st
}

func timeFromNano(n int64) time.Time { return time.Unix(0, n) }
