package oncekv

import (
	"fmt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/layout"
)

// NextFence issues a fencing token for resource: strictly greater than
// every token issued for resource before, by this process or any earlier
// one. Tokens of different resources are independent; each starts at 1.
//
// The counter is committed in its own write transaction before NextFence
// returns, and durable unless Options.NoSync is set, so a token is never
// issued twice, not even after a crash right after it was handed out. Pass
// the token to Bucket.PutFenced (here or in any store that checks fences):
// a writer that took its token before another one, then stalled, is
// refused instead of overwriting the newer write.
//
// Errors: ErrResourceRequired for an empty resource, ErrKeyTooLarge for one
// over bbolt's key limit, ErrClosed after Close.
func (db *DB) NextFence(resource string) (uint64, error) {
	if !db.life.enter() {
		return 0, ErrClosed
	}
	defer db.life.exit()
	var token uint64
	err := db.write(func(w *writeTx) (err error) {
		token, err = layout.NextToken(w.btx, []byte(resource))
		return err
	})
	if err != nil {
		return 0, &resourceError{resource: resource, err: err}
	}
	return token, nil
}

// NextFence issues a fencing token for resource inside the transaction:
// the same counter as DB.NextFence, strictly greater than every token
// issued for resource before, and committed with the transaction. If the
// transaction rolls back, so does the counter, and the token was never
// issued: nothing can have used it outside, since the transaction's
// writes never became visible.
//
// Errors: ErrTxNotWritable in a read-only transaction, ErrTxClosed after
// it ended, ErrResourceRequired for an empty resource, ErrKeyTooLarge for
// one over bbolt's key limit; each names the resource.
func (tx *Tx) NextFence(resource string) (uint64, error) {
	if err := tx.checkWrite(); err != nil {
		return 0, &resourceError{resource: resource, err: err}
	}
	token, err := layout.NextToken(tx.btx, []byte(resource))
	if err != nil {
		return 0, &resourceError{resource: resource, err: err}
	}
	return token, nil
}

// resourceError names the resource of a failed NextFence.
type resourceError struct {
	resource string
	err      error
}

func (e *resourceError) Error() string {
	return fmt.Sprintf("oncekv: next fence of %q: %s", base.Clip(e.resource), trimPrefix(e.err))
}

func (e *resourceError) Unwrap() error { return e.err }
