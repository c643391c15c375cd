package watermill

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidOptions is returned by Middleware for options it cannot
	// run with, naming every bad field.
	ErrInvalidOptions = errors.New("oncekv: watermill: invalid options")
	// ErrNoKey: a message has no idempotency key (an empty UUID, or the
	// named metadata field is missing or empty). Permanent: the message
	// is poison.
	ErrNoKey = errors.New("oncekv: watermill: message has no idempotency key")
	// ErrNoHandler: the message's context names no handler (it did not
	// come through a Router) and Options.Handler is empty. Permanent.
	ErrNoHandler = errors.New("oncekv: watermill: no handler name: set Options.Handler, or run the middleware in a Router")
	// ErrNoTx is returned by a TxHandler called outside the middleware:
	// its message's context carries no transaction.
	ErrNoTx = errors.New("oncekv: watermill: no oncekv transaction in the message's context: add the middleware")
	// ErrBadResponse: the produced messages stored with a key's mark do
	// not decode. Permanent: the bytes will not change.
	ErrBadResponse = errors.New("oncekv: watermill: stored produced messages do not decode")
)

// PoisonError is what the middleware returns for a message no retry can
// fix (oncekv.Classify says GiveUp): a permanent failure, FAILED replayed
// from the mark, a key reused with another payload, no key. Route it to a
// poison queue with Watermill's middleware.PoisonQueueWithFilter and
// IsPoison, added before this middleware; without one, the subscriber
// redelivers it, and the store answers each delivery with the same error.
type PoisonError struct {
	Key string // the message's key, empty when it had none
	Err error
}

// Error names the key and the cause.
func (e *PoisonError) Error() string {
	return fmt.Sprintf("oncekv: watermill: poison message %q: %v", e.Key, e.Err)
}

// Unwrap returns the cause.
func (e *PoisonError) Unwrap() error { return e.Err }

// IsPoison reports whether err is, or wraps, a *PoisonError: the filter of
// middleware.PoisonQueueWithFilter.
func IsPoison(err error) bool {
	var pe *PoisonError
	return errors.As(err, &pe)
}
