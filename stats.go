package oncekv

import (
	"os"
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
	// without running the effect. Zero for long is suspicious: at-least-once
	// delivery does redeliver.
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
	// EffectErrors counts transient errors of Apply's effect (while its
	// context was live) and of Claim.Complete's.
	EffectErrors uint64
	// InvalidRequests counts requests rejected as bad input, in Stats.Total
	// only: their handler name never creates an entry.
	InvalidRequests uint64
	// Aborted counts requests that applied nothing because their context
	// ended (during Apply's effect too), the commit failed or a record did
	// not decode.
	Aborted uint64
	// Fenced counts claim operations rejected with ErrFenced.
	Fenced uint64

	// Takeovers counts claims that took a key over from an earlier attempt
	// that recorded no outcome: its lease ran out, it was released, or its
	// process died (Claim.TakenOver).
	Takeovers uint64
	// ProbeApplied counts takeovers whose probe answered OutcomeApplied:
	// the key was recorded DONE with the probe's response, the effect not
	// run again.
	ProbeApplied uint64
	// Parked counts keys parked because a probe answered OutcomeUnknown.
	Parked uint64
	// ParkRefused counts OutcomeUnknown answers that found
	// Options.MaxParked keys parked already (ErrParkFull).
	ParkRefused uint64
	// ParkedAnswers counts requests answered with ErrParked.
	ParkedAnswers uint64
	// TombstoneDuplicates counts the duplicates, in DuplicatesSuppressed
	// or FailedReplayed too, answered from a tombstone: their stored
	// response had expired (Result.ResponseExpired).
	TombstoneDuplicates uint64
	// LateDuplicates estimates the keys applied again though an expired
	// window had held them: every record of the key was gone. An estimate
	// from Bloom filters (docs/design/tombstones.md): it may count a new
	// key by a false positive, and misses the keys of filters lost to a
	// crash.
	LateDuplicates uint64
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
		Takeovers:            c.Takeovers - other.Takeovers,
		ProbeApplied:         c.ProbeApplied - other.ProbeApplied,
		Parked:               c.Parked - other.Parked,
		ParkRefused:          c.ParkRefused - other.ParkRefused,
		ParkedAnswers:        c.ParkedAnswers - other.ParkedAnswers,
		TombstoneDuplicates:  c.TombstoneDuplicates - other.TombstoneDuplicates,
		LateDuplicates:       c.LateDuplicates - other.LateDuplicates,
	}
}

// Add returns c + other, for summing the counters of several handlers.
func (c Counters) Add(other Counters) Counters {
	c.add(other)
	return c
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
	c.Takeovers += o.Takeovers
	c.ProbeApplied += o.ProbeApplied
	c.Parked += o.Parked
	c.ParkRefused += o.ParkRefused
	c.ParkedAnswers += o.ParkedAnswers
	c.TombstoneDuplicates += o.TombstoneDuplicates
	c.LateDuplicates += o.LateDuplicates
}

// Stats is a snapshot of a DB's counters and gauges; Sub two of them for
// rates. Exporters (Prometheus, expvar) adapt it.
type Stats struct {
	// Total sums Handlers and OtherHandlers, plus the requests rejected as
	// bad input (Total.InvalidRequests).
	Total Counters
	// Handlers holds the counters of each handler seen since Open, the first
	// Options.MaxHandlerStats of them.
	Handlers map[string]Counters
	// OtherHandlers sums the handlers that found Handlers full.
	OtherHandlers Counters
	// Commits counts write transactions committed.
	Commits uint64
	// FencedWrites counts writes refused by PutFenced (ErrFenced) and
	// PutIfVersion (ErrVersionConflict, ErrUnversioned).
	FencedWrites uint64
	// BloomNegatives counts window look-ups skipped because the window's
	// filter said the key was definitely not there.
	BloomNegatives uint64
	// BloomFalsePositives counts window look-ups the filter let through that
	// found nothing: over BloomNegatives+BloomFalsePositives, the rate.
	BloomFalsePositives uint64
	// ExpiredWindows and ExpiredMarks count what expiry dropped since Open.
	ExpiredWindows uint64
	ExpiredMarks   uint64
	// ClockJumps counts the forward jumps of Options.Now over
	// Options.MaxClockJump held back since Open.
	ClockJumps uint64

	// DuplicateAges holds, per handler of Handlers, how old the
	// duplicates were (their time less their key's FirstSeen):
	// OtherDuplicateAges sums the handlers past the cap, and
	// TotalDuplicateAges every handler. `oncekv advise` reads them.
	DuplicateAges      map[string]AgeHistogram
	OtherDuplicateAges AgeHistogram
	TotalDuplicateAges AgeHistogram

	// LiveMarks is the number of marks in the live windows (a gauge).
	LiveMarks uint64
	// ParkedKeys is the number of keys parked now, waiting for an operator
	// (DB.Parked), at most Options.MaxParked (a gauge).
	ParkedKeys uint64
	// Tombstones is the number of tombstones kept, and TombstoneWindows
	// the windows holding only them (gauges; see Options.TombstoneRetention).
	Tombstones       uint64
	TombstoneWindows []WindowStats
	// OldestMarkAge is the age of the oldest live window holding marks; zero
	// with no marks.
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
	d.DuplicateAges = make(map[string]AgeHistogram, len(s.DuplicateAges))
	for h, a := range s.DuplicateAges {
		d.DuplicateAges[h] = a.Sub(other.DuplicateAges[h])
	}
	d.OtherDuplicateAges = s.OtherDuplicateAges.Sub(other.OtherDuplicateAges)
	d.TotalDuplicateAges = s.TotalDuplicateAges.Sub(other.TotalDuplicateAges)
	d.File = s.File.Sub(other.File)
	d.CommitHistograms = s.CommitHistograms.Sub(other.CommitHistograms)
	return d
}

// Stats returns a snapshot of the counters since Open and the gauges now.
func (db *DB) Stats() Stats {
	st := db.stats.snapshot()
	st.ClockJumps = db.clock.jumps.Load()
	st.ParkedKeys = uint64(max(db.parkedKeys.Load(), 0))
	now := db.clock.read()
	for _, w := range db.live.Windows() {
		ws := WindowStats{
			Start: time.Unix(0, w.Start),
			End:   time.Unix(0, db.windowConfig.End(w.Start)),
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
	st.TombstoneWindows, st.Tombstones = db.tombStats()
	st.File = db.fileStats()
	st.CommitHistograms = db.stats.commitHist.snapshot()
	return st
}

// statsCollector keeps atomic counters per handler: at most maxHandlers
// entries (Options.MaxHandlerStats), then one shared overflow set; invalid
// requests count store-wide without touching the map.
type statsCollector struct {
	handlers sync.Map // string -> *handlerCounters, at most maxHandlers entries
	// maxHandlers is Options.MaxHandlerStats (0 when negative), set by Open.
	maxHandlers int
	// mu serialises adding an entry, so the cap holds.
	mu struct {
		sync.Mutex
		entries int
	}
	// full is set at the cap, so later handlers do not contend for mu.
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

// handlerCounters are one handler's counters: one per outcome (and per
// extra count of extraCounts), and its duplicates' ages.
type handlerCounters struct {
	n    [outcomeCount + extraCounts]atomic.Uint64
	ages ageCounter
}

// The counts that are not outcomes of a request, indexes of
// handlerCounters.n after the outcomes: a request answered from a
// tombstone is a duplicate and a tombstone duplicate.
const (
	countTombstone = outcomeCount + iota // a duplicate answered from a tombstone
	countLate                            // applied again after every record of the key was gone
	countTakeover                        // a claim took the key over
	extraCounts    = iota
)

func (s *statsCollector) count(handler string, kind outcome) {
	switch kind {
	case outcomeNone:
		return
	case outcomeInvalid:
		s.invalid.Add(1)
		return
	}
	s.countersOf(handler).n[kind].Add(1)
}

// countExtra adds one to handler's count c, one of the count* constants.
func (s *statsCollector) countExtra(handler string, c outcome) {
	s.countersOf(handler).n[c].Add(1)
}

// countersOf returns handler's counters, adding an entry while there is
// room and the overflow set after that.
func (s *statsCollector) countersOf(handler string) *handlerCounters {
	if v, ok := s.handlers.Load(handler); ok {
		return v.(*handlerCounters)
	}
	// Past the cap, and for a name no request could carry, the overflow set.
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
	// A copy: the caller's string may be cut from a larger buffer.
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
	st.DuplicateAges = map[string]AgeHistogram{}
	s.handlers.Range(func(k, v any) bool {
		h := v.(*handlerCounters)
		c := h.load()
		st.Handlers[k.(string)] = c
		st.Total.add(c)
		ages := h.ages.snapshot()
		st.DuplicateAges[k.(string)] = ages
		st.TotalDuplicateAges = st.TotalDuplicateAges.Add(ages)
		return true
	})
	st.OtherHandlers = s.other.load()
	st.Total.add(st.OtherHandlers)
	st.OtherDuplicateAges = s.other.ages.snapshot()
	st.TotalDuplicateAges = st.TotalDuplicateAges.Add(st.OtherDuplicateAges)
	st.Total.InvalidRequests += s.invalid.Load()
	return st
}

func (h *handlerCounters) load() Counters {
	n := &h.n
	return Counters{
		Applied:              n[outcomeApplied].Load(),
		DuplicatesSuppressed: n[outcomeDuplicate].Load(),
		InProgressConflicts:  n[outcomeInProgress].Load(),
		KeyReuses:            n[outcomeKeyReuse].Load(),
		FailedRecorded:       n[outcomeFailedRecorded].Load(),
		FailedReplayed:       n[outcomeFailedReplayed].Load(),
		EffectErrors:         n[outcomeEffectError].Load(),
		Aborted:              n[outcomeAborted].Load(),
		Fenced:               n[outcomeFenced].Load(),
		Takeovers:            n[countTakeover].Load(),
		ProbeApplied:         n[outcomeProbeApplied].Load(),
		Parked:               n[outcomeParked].Load(),
		ParkRefused:          n[outcomeParkRefused].Load(),
		ParkedAnswers:        n[outcomeParkedAnswer].Load(),
		TombstoneDuplicates:  n[countTombstone].Load(),
		LateDuplicates:       n[countLate].Load(),
	}
}

// FileStats describes the bbolt file under a DB. bbolt never shrinks a
// file: expiry's freed pages are reused, so under steady traffic Size stays
// flat while FreeBytes rises after each expiry and falls as marks fill it.
type FileStats struct {
	// Size is the file's length in bytes; bbolt grows it ahead of use
	// (doubling up to 16 MiB, then 16 MiB at a time).
	Size int64
	// HighWater is the part of the file pages were ever allocated in, as of
	// the last commit (or Open); HighWater - FreeBytes is the data.
	HighWater int64
	// PageSize is the file's page size in bytes.
	PageSize int
	// FreePages is the number of pages on the freelist.
	FreePages int
	// PendingPages is the number of freed pages still seen by an open read
	// transaction: a long one keeps them pending, and the file grows.
	PendingPages int
	// FreeBytes is (FreePages + PendingPages) * PageSize (bbolt's FreeAlloc).
	FreeBytes int64
	// FreelistBytes is the size of the freelist as written by every commit.
	FreelistBytes int
	// OpenReadTxs is the number of read transactions open, oncekv's own
	// included: up to 16 snapshots duplicates share stay open until the
	// next commit.
	OpenReadTxs int
	// ReadTxs counts the read transactions started since Open.
	ReadTxs uint64
}

// Sub returns f with ReadTxs, its only counter, less other's.
func (f FileStats) Sub(other FileStats) FileStats {
	f.ReadTxs -= other.ReadTxs
	return f
}

// fileStats reads the file's size and bbolt's figures (as of the last
// transaction's end); zeros once closed.
func (db *DB) fileStats() FileStats {
	if !db.life.enter() {
		return FileStats{}
	}
	defer db.life.exit()
	bs := db.bolt.Stats()
	f := FileStats{
		PageSize:      db.bolt.Info().PageSize,
		FreePages:     bs.FreePageN,
		PendingPages:  bs.PendingPageN,
		FreeBytes:     int64(bs.FreeAlloc),
		FreelistBytes: bs.FreelistInuse,
		OpenReadTxs:   bs.OpenTxN,
		ReadTxs:       uint64(max(bs.TxN, 0)),
	}
	f.HighWater = db.stats.commitHist.highWater.Load()
	// By path: bbolt does not expose its file handle.
	if fi, err := os.Stat(db.path); err == nil {
		f.Size = fi.Size()
	}
	return f
}

// The numbers of buckets of CommitHistograms, whose bounds are fixed, so
// that snapshots subtract bucket by bucket.
const (
	// CommitDurationBuckets is the length of CommitHistograms.Duration.
	CommitDurationBuckets = 14
	// CommitRequestBuckets is the length of CommitHistograms.Requests.
	CommitRequestBuckets = 11
)

// commitDurationBounds span a NoSync commit on tmpfs to a stuck one.
var commitDurationBounds = [CommitDurationBuckets]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	time.Second, 5 * time.Second,
}

// commitRequestBounds are powers of two up to the default MaxGroupSize.
var commitRequestBounds = [CommitRequestBuckets]uint64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// CommitDurationBounds returns the upper bounds of the duration buckets:
// 50µs, 100µs, 250µs, 500µs, 1ms, 2.5ms, 5ms, 10ms, 25ms, 50ms, 100ms,
// 250ms, 1s, 5s. The array is a copy.
func CommitDurationBounds() [CommitDurationBuckets]time.Duration { return commitDurationBounds }

// CommitRequestBounds returns the upper bounds of the requests-per-commit
// buckets: 1, 2, 4, ..., 1024. The array is a copy.
func CommitRequestBounds() [CommitRequestBuckets]uint64 { return commitRequestBounds }

// CommitHistograms are cumulative histograms of the commits since Open, in
// the fixed buckets of CommitDurationBounds and CommitRequestBounds, as
// Prometheus takes them: bucket i counts the observations at most bound i,
// and Count is the +Inf bucket.
type CommitHistograms struct {
	// Count is the number of commits, of every kind.
	Count uint64
	// Duration[i] counts the commits that held the write lock, effects and
	// fsync included, at most CommitDurationBounds()[i].
	Duration [CommitDurationBuckets]uint64
	// DurationSum is the total time of the Count commits.
	DurationSum time.Duration

	// MarkCommits is the number of commits that wrote a mark; only those
	// enter Requests.
	MarkCommits uint64
	// Requests[i] counts those whose marks written were at most
	// CommitRequestBounds()[i]: the group sizes.
	Requests [CommitRequestBuckets]uint64
	// RequestSum is the marks those commits wrote; over MarkCommits, the
	// average group size.
	RequestSum uint64
}

// Sub returns h - other: the commits between two snapshots.
func (h CommitHistograms) Sub(other CommitHistograms) CommitHistograms {
	d := CommitHistograms{
		Count:       h.Count - other.Count,
		DurationSum: h.DurationSum - other.DurationSum,
		MarkCommits: h.MarkCommits - other.MarkCommits,
		RequestSum:  h.RequestSum - other.RequestSum,
	}
	for i := range d.Duration {
		d.Duration[i] = h.Duration[i] - other.Duration[i]
	}
	for i := range d.Requests {
		d.Requests[i] = h.Requests[i] - other.Requests[i]
	}
	return d
}

// commitHistograms records commits under a mutex, so that a snapshot's
// Count and buckets agree.
type commitHistograms struct {
	mu sync.Mutex
	h  CommitHistograms
	// highWater is FileStats.HighWater, read after each commit.
	highWater atomic.Int64
}

// committedLocked records a successful commit, under writeMu, and reads the
// file's high-water mark there, where no writer can be remapping: a
// transaction inside Stats could deadlock a Stats called inside View.
func (db *DB) committedLocked(began time.Time, marks int) {
	db.stats.commitHist.record(time.Since(began), marks)
	db.noteHighWater()
}

// noteHighWater reads the file's high-water mark; Open calls it too.
func (db *DB) noteHighWater() {
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		db.stats.commitHist.highWater.Store(tx.Size())
		return nil
	})
}

// record adds one commit that took took and wrote marks marks.
func (c *commitHistograms) record(took time.Duration, marks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := &c.h
	h.Count++
	h.DurationSum += took
	for i, b := range commitDurationBounds {
		if took <= b {
			h.Duration[i]++
		}
	}
	if marks <= 0 {
		return
	}
	h.MarkCommits++
	h.RequestSum += uint64(marks)
	for i, b := range commitRequestBounds {
		if uint64(marks) <= b {
			h.Requests[i]++
		}
	}
}

func (c *commitHistograms) snapshot() CommitHistograms {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h
}

// lookupCounts are the counters a transaction moves (refused fenced writes,
// filter answers), published once per decision, never once per attempt.
type lookupCounts struct {
	fenced, bloomNegatives, bloomFalsePositives uint64
}

func (w *writeTx) counts() lookupCounts {
	return lookupCounts{
		fenced:              w.tx.life.Rejected(),
		bloomNegatives:      w.bloomNegatives,
		bloomFalsePositives: w.bloomFalsePositives,
	}
}

func (c lookupCounts) sub(o lookupCounts) lookupCounts {
	return lookupCounts{c.fenced - o.fenced, c.bloomNegatives - o.bloomNegatives, c.bloomFalsePositives - o.bloomFalsePositives}
}

func (s *statsCollector) addCounts(c lookupCounts) {
	s.fencedWrites.Add(c.fenced)
	s.bloomNegatives.Add(c.bloomNegatives)
	s.bloomFalsePositives.Add(c.bloomFalsePositives)
}

// countLookup counts one look-up the window's filter answered: negative, or
// a false positive. A write transaction's count goes with its outcome.
func (db *DB) countLookup(btx *bolt.Tx, negative bool) {
	if btx.Writable() && db.current != nil {
		if negative {
			db.current.bloomNegatives++
		} else {
			db.current.bloomFalsePositives++
		}
		return
	}
	if negative {
		db.stats.bloomNegatives.Add(1)
	} else {
		db.stats.bloomFalsePositives.Add(1)
	}
}
