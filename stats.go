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
	// FencedWrites counts writes refused by PutFenced (ErrFenced) and
	// PutIfVersion (ErrVersionConflict, ErrUnversioned).
	FencedWrites uint64
	// BloomNegatives counts window look-ups skipped because the window's
	// filter said the key was definitely not there.
	BloomNegatives uint64
	// BloomFalsePositives counts window look-ups the filter let through
	// that found nothing. Over BloomNegatives+BloomFalsePositives it
	// estimates the filters' false-positive rate.
	BloomFalsePositives uint64
	// ExpiredWindows and ExpiredMarks count what expiry dropped since Open.
	// A retry of an expired key is applied again.
	ExpiredWindows uint64
	ExpiredMarks   uint64

	// LiveMarks is the number of marks in the live windows (a gauge).
	LiveMarks uint64
	// OldestMarkAge is how long ago the oldest live window holding marks
	// began: no mark is older. Zero with no marks.
	OldestMarkAge time.Duration
	// Windows describes every live window, oldest first.
	Windows []WindowStats

	// File describes the bbolt file: size, free pages, open readers.
	File FileStats
	// CommitHistograms are the durations and group sizes of the commits.
	CommitHistograms CommitHistograms
}

// WindowStats describes one live window.
type WindowStats struct {
	Start, End  time.Time
	Marks       uint64
	FilterBytes int // memory of its Bloom filter; 0 without one
}

// Sub returns s - other: counters of the interval between two snapshots.
// Gauges (LiveMarks, OldestMarkAge, Windows) are s's.
func (s Stats) Sub(other Stats) Stats {
	d := s
	d.Total = s.Total.Sub(other.Total)
	d.Handlers = make(map[string]Counters, len(s.Handlers))
	for h, c := range s.Handlers {
		d.Handlers[h] = c.Sub(other.Handlers[h])
	}
	d.Commits -= other.Commits
	d.FencedWrites -= other.FencedWrites
	d.BloomNegatives -= other.BloomNegatives
	d.BloomFalsePositives -= other.BloomFalsePositives
	d.ExpiredWindows -= other.ExpiredWindows
	d.ExpiredMarks -= other.ExpiredMarks
	d.File = s.File.Sub(other.File)
	d.CommitHistograms = s.CommitHistograms.Sub(other.CommitHistograms)
	return d
}

// Stats returns a snapshot of the counters since Open and the gauges now.
func (db *DB) Stats() Stats {
	st := db.stats.snapshot()
	now := db.clock.read()
	for _, w := range db.windows.Windows() {
		ws := WindowStats{
			Start: time.Unix(0, w.Start),
			End:   time.Unix(0, db.window.End(w.Start)),
			Marks: uint64(max(w.Marks.Load(), 0)),
		}
		if w.Filter != nil {
			ws.FilterBytes = w.Filter.SizeBytes()
		}
		if ws.Marks > 0 && st.OldestMarkAge == 0 {
			st.OldestMarkAge = max(now.Sub(ws.Start), 0)
		}
		st.LiveMarks += ws.Marks
		st.Windows = append(st.Windows, ws)
	}
	st.File = db.fileStats()
	st.CommitHistograms = db.stats.commitHist.snapshot()
	return st
}

// statsCollector keeps one set of atomic counters per handler. Handlers are
// operation names, few and fixed, so a map of them stays small.
type statsCollector struct {
	handlers            sync.Map // string -> *handlerCounters
	commits             atomic.Uint64
	fencedWrites        atomic.Uint64
	bloomNegatives      atomic.Uint64
	bloomFalsePositives atomic.Uint64
	expiredWindows      atomic.Uint64
	expiredMarks        atomic.Uint64
	commitHist          commitHistograms
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
	st := Stats{
		Handlers:            map[string]Counters{},
		Commits:             s.commits.Load(),
		FencedWrites:        s.fencedWrites.Load(),
		BloomNegatives:      s.bloomNegatives.Load(),
		BloomFalsePositives: s.bloomFalsePositives.Load(),
		ExpiredWindows:      s.expiredWindows.Load(),
		ExpiredMarks:        s.expiredMarks.Load(),
	}
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
