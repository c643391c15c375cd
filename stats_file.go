package oncekv

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

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
