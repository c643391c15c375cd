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

// FileStats describes the bbolt file under a DB: what an operator watches to
// see whether the file plateaus under a fixed retention (see the README's
// "Operating it"). bbolt never shrinks a file: pages freed by expiry go to
// its freelist and are reused by later writes, so under steady traffic Size
// stays flat while FreeBytes rises after each expiry and falls as new marks
// fill it.
type FileStats struct {
	// Size is the file's length on disk in bytes. bbolt grows it in steps
	// (doubling up to 16 MiB, then 16 MiB at a time), ahead of its use.
	Size int64
	// HighWater is the part of the file pages were ever allocated in:
	// bbolt's high-water mark times the page size, as of the last commit
	// (or Open). Every page below it is in use or free (FreeBytes); the
	// file beyond it (Size - HighWater) is room bbolt grew ahead of need.
	// HighWater - FreeBytes is the data.
	HighWater int64
	// PageSize is the file's page size in bytes.
	PageSize int
	// FreePages is the number of pages on the freelist that the next write
	// transaction may reuse.
	FreePages int
	// PendingPages is the number of pages freed by recent write
	// transactions that become free once no read transaction that began
	// before them is still open. A long read transaction keeps them
	// pending, and writers then grow the file instead: bbolt's classic
	// cause of file growth (watch OpenReadTxs).
	PendingPages int
	// FreeBytes is (FreePages + PendingPages) * PageSize, bbolt's FreeAlloc:
	// space inside the file that writes will reuse before it grows.
	FreeBytes int64
	// FreelistBytes is the size of the freelist itself when written to the
	// file (every commit writes it). It grows with fragmentation.
	FreelistBytes int
	// OpenReadTxs is the number of read transactions open right now,
	// oncekv's own (duplicate look-ups, View) included.
	OpenReadTxs int
	// ReadTxs counts the read transactions started since Open, oncekv's
	// own included (a counter; the other fields are gauges).
	ReadTxs uint64
}

// Sub returns f with ReadTxs, its only counter, replaced by the change
// since other; the gauges are f's.
func (f FileStats) Sub(other FileStats) FileStats {
	f.ReadTxs -= other.ReadTxs
	return f
}

// fileStats reads the file's size and bbolt's freelist and transaction
// counters. bbolt updates the freelist figures when a transaction closes, so
// they describe the state after the last one. A closed DB reports zeros.
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
	// By path: bbolt does not expose its file handle. The file is locked
	// by this process, so it is the same file unless someone renamed it.
	if fi, err := os.Stat(db.path); err == nil {
		f.Size = fi.Size()
	}
	return f
}

// The bucket bounds of CommitHistograms. They are fixed, so that two
// snapshots always subtract bucket by bucket and an exporter can declare
// its buckets once.
const (
	// CommitDurationBuckets is the length of CommitHistograms.Duration.
	CommitDurationBuckets = 14
	// CommitRequestBuckets is the length of CommitHistograms.Requests.
	CommitRequestBuckets = 11
)

// commitDurationBounds span a NoSync commit on tmpfs (tens of µs) to a
// commit stuck behind a slow disk or a long effect (seconds).
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

// CommitHistograms are cumulative histograms of the write transactions
// committed since Open, in the fixed buckets of CommitDurationBounds and
// CommitRequestBounds, in the form Prometheus histograms take: bucket i
// counts the observations at most bound i, so the counts never decrease
// along the array, and Count (which includes those above the last bound) is
// the +Inf bucket.
type CommitHistograms struct {
	// Count is the number of commits: Apply groups, batches, claims,
	// Update, Forget, expiry steps, Close.
	Count uint64
	// Duration[i] counts the commits that took at most
	// CommitDurationBounds()[i], from the start of the write transaction to
	// the end of its commit (fsync included): how long the writer held the
	// write lock, with the effects that ran inside it.
	Duration [CommitDurationBuckets]uint64
	// DurationSum is the total time of the Count commits.
	DurationSum time.Duration

	// MarkCommits is the number of commits that wrote at least one mark;
	// only those enter Requests, so that an Update or an expiry step does
	// not read as a group of zero.
	MarkCommits uint64
	// Requests[i] counts the commits whose marks written (one per request
	// applied, failed permanently, claimed or completed) were at most
	// CommitRequestBounds()[i]: the group size of group commit.
	Requests [CommitRequestBuckets]uint64
	// RequestSum is the total number of marks those commits wrote.
	// RequestSum / MarkCommits is the average group size.
	RequestSum uint64
}

// Sub returns h - other: the histograms of the commits between two
// snapshots.
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

// commitHistograms records commits. Commits come one at a time (under the
// write lock) and a Stats call is rare, so a mutex costs nothing and gives
// a snapshot in which Count and the buckets agree, which separate atomics
// would not.
type commitHistograms struct {
	mu sync.Mutex
	h  CommitHistograms
	// highWater is FileStats.HighWater, read after each commit so that
	// Stats needs no transaction (see committedLocked).
	highWater atomic.Int64
}

// committedLocked is the one call the commit path makes, after a
// successful commit only, still under writeMu: it records the commit, which
// began at began and wrote marks marks, and reads the file's high-water
// mark. That read is a transaction of its own, taken here because no writer
// can be remapping the file now; a transaction inside Stats could deadlock
// a caller who asks for Stats inside View while a writer waits to remap.
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

// lookupCounts are the counters a transaction moves: refused fenced writes
// and Bloom filter answers. They are published once per decision, never
// once per attempt: a group transaction that rolls back and runs again
// would count them twice (see writeLocked and commitOpsLocked).
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

// countLookup counts one window look-up that the window's filter answered:
// negative when it said "definitely not there", a false positive when it
// let the look-up through and the window did not hold the key. A look-up
// of the write transaction in progress is counted with that transaction's
// outcome; any other (a read transaction's) at once.
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
