package queue

import (
	"errors"
	"fmt"
)

// Errors of the queue. Each comes wrapped in an *Error naming the queue (and
// the key or message where there is one); errors.Is sees through it. The
// store's own errors (oncekv.ErrKeyReuse, oncekv.ErrFenced, oncekv.ErrClosed,
// oncekv.ErrKeyRequired) are returned the same way.
var (
	// ErrInvalidName: a queue name must be 1 to 64 bytes of ASCII letters,
	// digits, '.', '_' and '-'.
	ErrInvalidName = errors.New("oncekv: queue: invalid queue name")
	// ErrInvalidOptions: Open was given options that cannot work; the
	// message lists every bad field.
	ErrInvalidOptions = errors.New("oncekv: queue: invalid options")
	// ErrConflictingOptions: the queue is already open in this process with
	// other options.
	ErrConflictingOptions = errors.New("oncekv: queue: already open with other options")
	// ErrTooManyQueues: MaxOpenQueues queues are open in this process.
	ErrTooManyQueues = errors.New("oncekv: queue: too many open queues")
	// ErrBodyTooLarge: a body over Options.MaxBodySize (or MaxBytes).
	ErrBodyTooLarge = errors.New("oncekv: queue: body too large")
	// ErrFull: the queue holds MaxMessages or MaxBytes and its policy is
	// Reject. Nothing was enqueued.
	ErrFull = errors.New("oncekv: queue: full")
	// ErrNotFound: no dead letter (or, for View.Message, no live
	// message) has that ID.
	ErrNotFound = errors.New("oncekv: queue: no such message")
	// ErrNoQueue: NewView, or Open on a read-only store, was given the
	// name of a queue the store does not hold.
	ErrNoQueue = errors.New("oncekv: queue: no such queue")
	// ErrInvalidDuration: Extend was given a lease that is not positive, or
	// Defer a negative delay.
	ErrInvalidDuration = errors.New("oncekv: queue: invalid duration")
	// ErrNoMessage: a nil *Message was given to Ack, Nack, Extend or an
	// ack-and-receive (AckAndReceive, AckAndPoll, AckTxAndPoll).
	ErrNoMessage = errors.New("oncekv: queue: nil message")
	// ErrNilDB: Open was given a nil *oncekv.DB.
	ErrNilDB = errors.New("oncekv: queue: nil store")
	// ErrNotReceived: AckAndReceive's ack committed, and then no message
	// was received; the error names why (ctx done, the queue or the store
	// closed, the lease's commit failed). The message given is acked.
	ErrNotReceived = errors.New("oncekv: queue: acked; nothing received")
	// ErrQueueClosed: the Queue was closed.
	ErrQueueClosed = errors.New("oncekv: queue: closed")
)

// Error is an error of one queue operation, naming the queue and, where
// there is one, the message's key and ID.
type Error struct {
	Op    string // "enqueue", "receive", "ack", …
	Queue string
	Key   string // empty when the operation has no message
	ID    uint64 // zero when not known
	Err   error
}

// Error implements error.
func (e *Error) Error() string {
	s := fmt.Sprintf("oncekv: queue %q %s", e.Queue, e.Op)
	if e.Key != "" {
		s += fmt.Sprintf(" key %q", clip(e.Key))
	}
	if e.ID != 0 {
		s += fmt.Sprintf(" message %d", e.ID)
	}
	return s + ": " + trimPrefix(e.Err.Error())
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func (q *Queue) wrap(op string, m *Message, err error) error { return wrapErr(q.name, op, m, err) }

// wrapErr wraps err in an *Error of queue name, unless it is one.
func wrapErr(name, op string, m *Message, err error) error {
	if err == nil {
		return nil
	}
	var qe *Error
	if errors.As(err, &qe) {
		return err
	}
	e := &Error{Op: op, Queue: name, Err: err}
	if m != nil {
		e.Key, e.ID = m.Key, m.ID
	}
	return e
}

// clip shortens a user string for an error message.
func clip(s string) string {
	const max = 128
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

func trimPrefix(s string) string {
	for _, p := range []string{"oncekv: queue: ", "oncekv: "} {
		if len(s) > len(p) && s[:len(p)] == p {
			return s[len(p):]
		}
	}
	return s
}
