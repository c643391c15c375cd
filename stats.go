package oncekv

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Counters are the counters kept per handler, and summed in Stats.Total.
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
	// recorded) that Apply's effect returned while its context was live,
	// and those of Claim.Complete's effect.
	EffectErrors uint64
	// InvalidRequests counts requests rejected as bad input. It is counted
	// store-wide only, in Stats.Total, and is always zero in Stats.Handlers
	// and Stats.OtherHandlers: the handler name of a rejected request may be
	// empty, huge or garbage, so it never creates (or is credited to) an
	// entry of its own.
	InvalidRequests uint64
	// Aborted counts requests that applied nothing because their context
	// ended, the commit failed or a record did not decode. For Apply, a
	// context that ended while the effect ran counts here, whatever the
	// effect returned (the caller still gets the effect's error).
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
	// Total sums Handlers and OtherHandlers, plus the requests rejected as
	// bad input (Total.InvalidRequests).
	Total Counters
	// Handlers holds the counters of each handler seen since Open, up to
	// Options.MaxHandlerStats of them: the first ones seen keep their
	// entry until Close, and the map never grows past the cap.
	Handlers map[string]Counters
	// OtherHandlers sums the counters of every handler that found
	// Handlers full, so the totals stay right however many names arrive.
	OtherHandlers Counters
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
	// ClockJumps counts the forward jumps of Options.Now over
	// Options.MaxClockJump since Open. Each was held back until three
	// readings in a row confirmed it, or dropped when the clock came back.
	ClockJumps uint64

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
	d.OtherHandlers = s.OtherHandlers.Sub(other.OtherHandlers)
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
	d.ClockJumps -= other.ClockJumps
	d.File = s.File.Sub(other.File)
	d.CommitHistograms = s.CommitHistograms.Sub(other.CommitHistograms)
	return d
}

// Stats returns a snapshot of the counters since Open and the gauges now.
func (db *DB) Stats() Stats {
	st := db.stats.snapshot()
	st.ClockJumps = db.clock.jumps.Load()
	now := db.clock.read()
	for _, w := range db.windows.Windows() {
		ws := WindowStats{
			Start: time.Unix(0, w.Start),
			End:   time.Unix(0, db.window.End(w.Start)),
			Marks: uint64(w.Marks.Load()),
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

// statsCollector keeps one set of atomic counters per handler. Handler
// names come from requests, so the map is bounded: at most maxHandlers
// entries (Options.MaxHandlerStats), then one shared overflow set, and
// requests rejected as invalid count store-wide without touching the map.
type statsCollector struct {
	handlers sync.Map // string -> *handlerCounters, at most maxHandlers entries
	// maxHandlers is Options.MaxHandlerStats (0 when negative), set by Open.
	maxHandlers int
	// mu serialises adding an entry, so that concurrent new names cannot
	// overshoot the cap.
	mu struct {
		sync.Mutex
		entries int
	}
	// full is set once the map holds maxHandlers entries, so that the
	// counts of the handlers past the cap do not contend for mu.
	full                atomic.Bool
	other               handlerCounters
	invalid             atomic.Uint64
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
	switch kind {
	case outcomeNone:
		return
	case outcomeInvalid:
		s.invalid.Add(1)
		return
	}
	s.countersOf(handler)[kind].Add(1)
}

// countersOf returns handler's counters, adding an entry while there is
// room and the overflow set after that.
func (s *statsCollector) countersOf(handler string) *handlerCounters {
	if v, ok := s.handlers.Load(handler); ok {
		return v.(*handlerCounters)
	}
	// Past the cap, and for a name no request could carry (an aborted call
	// is counted before its request is validated), the overflow set.
	if s.full.Load() || handler == "" || len(handler) > bolt.MaxKeySize {
		return &s.other
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addLocked(handler)
}

func (s *statsCollector) addLocked(handler string) *handlerCounters {
	if v, ok := s.handlers.Load(handler); ok {
		return v.(*handlerCounters)
	}
	if s.mu.entries >= s.maxHandlers {
		s.full.Store(true)
		return &s.other
	}
	h := new(handlerCounters)
	// A copy, so that the entry does not keep alive whatever larger buffer
	// the caller's string was cut from.
	s.handlers.Store(strings.Clone(handler), h)
	s.mu.entries++
	return h
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
		c := v.(*handlerCounters).load()
		st.Handlers[k.(string)] = c
		st.Total.add(c)
		return true
	})
	st.OtherHandlers = s.other.load()
	st.Total.add(st.OtherHandlers)
	st.Total.InvalidRequests += s.invalid.Load()
	return st
}

func (h *handlerCounters) load() Counters {
	return Counters{
		Applied:              h[outcomeApplied].Load(),
		DuplicatesSuppressed: h[outcomeDuplicate].Load(),
		InProgressConflicts:  h[outcomeInProgress].Load(),
		KeyReuses:            h[outcomeKeyReuse].Load(),
		FailedRecorded:       h[outcomeFailedRecorded].Load(),
		FailedReplayed:       h[outcomeFailedReplayed].Load(),
		EffectErrors:         h[outcomeEffectError].Load(),
		Aborted:              h[outcomeAborted].Load(),
		Fenced:               h[outcomeFenced].Load(),
	}
}

func timeFromNano(n int64) time.Time { return time.Unix(0, n) }
