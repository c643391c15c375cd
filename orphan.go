package oncekv

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// Claims orphaned by a crash: only one process writes the file, so a claim
// found IN_PROGRESS at Open, with a token up to the claim counter's value
// then, belongs to a process that is gone, and reads as released unless
// Options.KeepOrphanedClaims is set (docs/design/claims.md).

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

// releaseOrphan makes m, when it is an orphaned claim, read as released;
// the mark on disk stays until the takeover rewrites it.
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
