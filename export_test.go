package oncekv

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
)

// SetFilterHook lets the external tests play the adversary with the Bloom
// filters: hook sees every answer ("maybe" or "definitely not") and returns
// the one the store acts on. A hook must never turn "maybe" into "no"; that
// would be a false negative by construction, not a test of the store. Set it
// right after Open, before any other call.
func SetFilterHook(db *DB, hook func(maybe bool) bool) {
	db.filterHook = func(maybe bool) bool { return maybe || hook(maybe) }
}

// CrashPoint names a place on the write path for SetCrashHook.
type CrashPoint = crashPoint

// The crash points; see crashPoint in write.go for where each one is.
const (
	CrashClaimTaken   = crashClaimTaken
	CrashBeforeEffect = crashBeforeEffect
	CrashAfterEffect  = crashAfterEffect
	CrashBeforeCommit = crashBeforeCommit
	CrashAfterCommit  = crashAfterCommit
)

// CrashPoints lists every crash point by the name the tests use.
var CrashPoints = map[string]CrashPoint{
	"claim-taken":   CrashClaimTaken,
	"before-effect": CrashBeforeEffect,
	"after-effect":  CrashAfterEffect,
	"before-commit": CrashBeforeCommit,
	"after-commit":  CrashAfterCommit,
}

// SetCrashHook makes db call hook at every crash point of its write path;
// the crash tests' child process kills itself there. Set it right after
// Open, before any other call.
func SetCrashHook(db *DB, hook func(CrashPoint)) { db.crashHook = hook }

// QueuedApplies returns how many Apply (or claim) calls wait in the group commit's
// queue for a commit to take them, so a test can line callers up behind a
// running commit.
func QueuedApplies(db *DB) int {
	db.group.mu.Lock()
	defer db.group.mu.Unlock()
	return len(db.group.mu.queue)
}

// SetMaxResponseSize lowers the largest response (plus permanent error
// message) a mark may hold, so a test can reach the limit without
// allocating gigabytes. Set it right after Open.
func SetMaxResponseSize(db *DB, n int) { db.maxResponse = n }

// PagesWritten returns how many pages bbolt has written to db's file since
// Open, for the benchmarks that count what a commit writes.
func PagesWritten(db *DB) int64 {
	st := db.bolt.Stats()
	return st.TxStats.GetWrite()
}

// FiltersRebuiltAtOpen returns how many windows' Bloom filters Open rebuilt
// by reading every key of the window, rather than loading a persisted one.
func FiltersRebuiltAtOpen(db *DB) int { return db.opened.rebuilt }

// BoltTxStats returns bbolt's transaction counters of db since Open (pages
// written, nodes spilled and split...), for the benchmarks that compare what
// a commit does with bare bbolt's.
func BoltTxStats(db *DB) bolt.TxStats { return db.bolt.Stats().TxStats }

// SetOwnSnapshots makes db's duplicate look-ups open and roll back a read
// transaction each, with a single Apply taking the op's way, as before
// snapshots were shared, so that a benchmark can time both side by side.
// Set it right after Open.
func SetOwnSnapshots(db *DB, own bool) { db.snaps.own = own }

// SnapshotHasMark looks handler/key up the way a duplicate does, in a
// snapshot from db's shared ones, and reports whether it found a mark.
func SnapshotHasMark(db *DB, handler, key string) (bool, error) {
	if !db.life.enter() {
		return false, ErrClosed
	}
	defer db.life.exit()
	sn, err := db.acquireSnapshot()
	if err != nil {
		return false, err
	}
	defer db.releaseSnapshot(sn)
	mkey := layout.MarkKey(handler, key)
	var m layout.FoundMark
	var counts lookupCounts
	return db.findInSnapshot(sn, db.live.Windows(), mkey, bloom.Sum64(mkey), &m, &counts)
}

// IdleSnapshots returns how many shared snapshots db keeps idle.
func IdleSnapshots(db *DB) int {
	n := 0
	for i := range db.snaps.slots {
		if db.snaps.slots[i].Load() != nil {
			n++
		}
	}
	return n
}
