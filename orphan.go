package oncekv

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// Claims orphaned by a crash.
//
// Only one process can have the file open for writing, so a claim found
// IN_PROGRESS when the store is opened was taken by a process that is gone:
// nobody will Extend, Complete or Fail it. Waiting for its lease to run out
// only delays the retry. By default such a claim counts as released from
// the moment the store is open: the next Claim or Apply of its key takes it
// over at once, with a greater token.
//
// The risk is the one of any takeover: the dead worker may have made its
// external call before it died. That is why the external system gets
// Claim.Key, the same for the taker, to deduplicate on. A program whose
// external system cannot deduplicate sets Options.KeepOrphanedClaims and
// waits out the lease instead, which narrows the double call to a worker
// that really stalled past its lease, and does not remove it.
//
// No scan is needed to find them: claim tokens come from one counter for
// the whole store, so every claim with a token up to the counter's value
// at Open was taken by an earlier process, and one taken by this process
// has a greater token. findMark applies the rule as it reads a mark.

// loadOrphanLine reads, at Open, the last claim token of earlier
// processes: every IN_PROGRESS mark with a token up to it is an orphan.
func (db *DB) loadOrphanLine(tx *bolt.Tx) error {
	if db.opts.KeepOrphanedClaims {
		return nil
	}
	last, err := layout.LastClaimToken(tx)
	db.orphansUpTo = last
	return err
}

// releaseOrphan makes m, when it is an orphaned claim, read as released: a
// lease that ran out whatever the clock says. The mark on disk is left as
// it is; the takeover rewrites it.
func (db *DB) releaseOrphan(m *layout.FoundMark) *layout.FoundMark {
	if db.isOrphan(m) {
		m.LeaseUntil = releasedLease
	}
	return m
}

// isOrphan reports whether m is a claim taken by an earlier process.
func (db *DB) isOrphan(m *layout.FoundMark) bool {
	return m != nil && m.State == layout.InProgress && m.Token != 0 && m.Token <= db.orphansUpTo
}
