package oncekv

import (
	"fmt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/layout"
)

// NextFence issues a fencing token for resource, strictly greater than any
// issued for it before, by any process: each resource counts from 1. It is
// committed before NextFence returns (durable unless Options.NoSync), so
// never issued twice. Pass it to Bucket.PutFenced, here or in any store
// that checks fences. Errors: ErrClosed; and, naming the resource,
// ErrResourceRequired, ErrKeyTooLarge, ErrReadOnly, a failed commit's.
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

// NextFence issues a fencing token for resource from DB.NextFence's
// counter, committed with the transaction: if it rolls back, the token was
// never issued. Errors, each naming the resource: ErrTxNotWritable,
// ErrTxClosed, ErrResourceRequired, ErrKeyTooLarge.
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
