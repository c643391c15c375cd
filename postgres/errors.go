package postgres

import (
	"errors"
	"fmt"

	"github.com/oncekv/oncekv"
)

// The store returns the root package's errors (oncekv.ErrKeyReuse,
// oncekv.ErrInProgress, oncekv.ErrFenced, ...), wrapped as the embedded
// store wraps them, so that errors.Is, errors.As and oncekv.Classify work
// alike on both. These are the PostgreSQL store's own.
var (
	// ErrEffectTx: an effect called Commit or Rollback on the transaction
	// it was given. The store commits or rolls back that transaction
	// itself, with the mark; the call did nothing. To undo part of an
	// effect, use a nested transaction (tx.Begin, a savepoint).
	ErrEffectTx = errors.New("oncekv: an effect must not commit or roll back the store's transaction")
)

// errBusy is a key whose advisory lock another transaction holds right
// now: another host's (or goroutine's) Apply running its effect, or a
// claim's step. There is no lease to wait for, so it is ErrInProgress
// without one: oncekv.Classify says RetryLater, and a backoff decides.
var errBusy = fmt.Errorf("%w: another transaction is applying or claiming the key", oncekv.ErrInProgress)

// requestError wraps err in a *oncekv.RequestError naming req's handler
// and key, unless it is one already.
func requestError(op string, req *oncekv.Request, err error) error {
	if err == nil {
		return nil
	}
	var re *oncekv.RequestError
	if errors.As(err, &re) {
		return err
	}
	return &oncekv.RequestError{Op: op, Handler: req.Handler, Key: req.Key, Err: err}
}
