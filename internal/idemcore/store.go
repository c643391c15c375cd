package idemcore

import (
	"context"
	"time"

	"github.com/oncekv/oncekv"
)

// Store is a record store the protocol runs on. Implementations must be
// safe for concurrent use.
type Store interface {
	// Claim claims req's key for lease, as oncekv.DB.Claim does: a claim
	// that holds the key, or one whose Done is true with the stored
	// response, or oncekv.ErrInProgress (ideally an error with a
	// LeaseUntil() time.Time method, as *oncekv.InProgressError has),
	// oncekv.ErrKeyReuse, oncekv.ErrClosed, ctx's error, the store's.
	Claim(ctx context.Context, req oncekv.Request, lease time.Duration) (Claim, error)
	// Now is the store's clock, the one its leases are on.
	Now() time.Time
	// Retention is how long a key is deduplicated at least, from when it
	// was first seen.
	Retention() time.Duration
	// Accepts reports whether w is a staged write this store can run.
	Accepts(w any) bool
}

// Claim is one claim of a key, as oncekv.Claim.
type Claim interface {
	// Key is the claim's stable id (oncekv.Claim.Key), the same on every
	// retry, takeover and host: the idempotency key for external systems.
	Key() string
	// Token is the claim's fencing token, greater at every takeover.
	Token() uint64
	// Done reports whether the key was already answered; Result then
	// holds the stored response and when the key was first seen.
	Done() bool
	Result() oncekv.Result
	// Extend moves the lease's end to lease from now. oncekv.ErrFenced or
	// oncekv.ErrClaimDone mean the claim is lost.
	Extend(ctx context.Context, lease time.Duration) error
	// Complete runs writes (each one Accepts took) and stores response as
	// the key's answer in one transaction: all or nothing, returning the
	// stored result (its FirstSeen). A write's error comes back wrapped
	// in a *WriteError.
	Complete(ctx context.Context, response []byte, writes []any) (oncekv.Result, error)
	// Release frees the key at once, keeping nothing: a retry runs
	// afresh (oncekv.Claim.Fail with an error that is not Permanent).
	Release(ctx context.Context, why error) error
	// Forget drops the key's mark as if it had never been seen: a retry
	// runs afresh whatever its fingerprint (oncekv.Claim.Abandon).
	Forget(ctx context.Context) error
}

// WriteError is a staged write's error, carried out of Claim.Complete. It
// has no Unwrap on purpose: an oncekv.Permanent inside must not make the
// store record the key FAILED, since the protocol releases it instead.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return "oncekv: staged write: " + e.Err.Error() }

// RunWrites runs writes, each a W (the store's type, which Accepts
// checked), in order with run, and returns the first error wrapped in a
// *WriteError: a store's Claim.Complete calls it in its transaction.
func RunWrites[W any](writes []any, run func(w W) error) error {
	for _, w := range writes {
		if err := run(w.(W)); err != nil {
			return &WriteError{err}
		}
	}
	return nil
}
