package queue

import (
	"context"
	"fmt"

	"github.com/oncekv/oncekv"
)

// AckAndReceive acks m and leases the next visible message in one
// transaction (one commit): a steady consumer's loop pays one commit per
// message, where Ack then Receive pays two. It is Ack followed by Receive
// in every other way: the ack is Ack's (fenced, counted, an ordering
// key's next message let in), the lease is Receive's (oldest visible
// first, a fresh token, a lease that ran out delivered again or
// dead-lettered), and concurrent calls share commits with Receive, Ack
// and Extend.
//
// When no message is visible after the ack, the ack commits alone and
// AckAndReceive waits as Receive does, without polling: an enqueue, nack
// or redrive committed in this process wakes it at once, a delayed
// message or a lease running out at its time.
//
// Errors: when the ack fails, Ack's errors (an error matching
// oncekv.ErrFenced, ErrNoMessage, ctx's, ErrQueueClosed, the store's):
// nothing was written and nothing leased, so call Receive to go on. Once
// the ack has committed, an error of the wait or of the lease matches
// ErrNotReceived as well as its cause (ctx's error, ErrQueueClosed,
// oncekv.ErrClosed, the store's): m is acked, and no message is leased.
func (q *Queue) AckAndReceive(ctx context.Context, m *Message) (*Message, error) {
	// Taken before the commit looks at the index, as Receive takes it
	// before its look: a message made visible by a later commit wakes
	// the wait below.
	wake, err := q.waitChan()
	if err != nil {
		return nil, q.wrap("ack", m, err)
	}
	next, at, err := q.ackAndPoll(ctx, m)
	if err != nil || next != nil {
		return next, err
	}
	if err := q.wait(ctx, wake, at); err != nil {
		return nil, q.notReceived(err)
	}
	ms, err := q.receiveLoop(ctx, 1)
	if err != nil {
		return nil, q.notReceived(err)
	}
	return ms[0], nil
}

// AckAndPoll is AckAndReceive without the wait: it acks m and leases the
// oldest message visible then in one commit, and returns nil with the
// ack committed when none is visible. Its errors are Ack's: nothing was
// written, nothing leased. A consumer that must tell the world the ack
// committed before it waits (a relay counting what it sent) calls it,
// then Receive when it returned nil.
func (q *Queue) AckAndPoll(ctx context.Context, m *Message) (*Message, error) {
	next, _, err := q.ackAndPoll(ctx, m)
	return next, err
}

// ackAndPoll is AckAndPoll, returning also when the first message of the
// index becomes visible when it leased none (see firstVisible).
func (q *Queue) ackAndPoll(ctx context.Context, m *Message) (next *Message, at int64, err error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, q.wrap("ack", m, err)
	}
	err = q.batch.do(ctx, func(otx *oncekv.Tx) (err error) {
		// Run again when another operation of the batch fails: start over.
		next, at = nil, noneVisible
		if next, err = q.AckTxAndPoll(otx, m); err != nil || next != nil {
			return err
		}
		at, err = firstVisible(otx.Bucket(q.b.index))
		return err
	})
	if err != nil {
		return nil, 0, q.wrap("ack", m, err)
	}
	return next, at, nil
}

// AckTxAndPoll is AckAndPoll inside otx: it acks m
// (see AckTx) and leases the oldest message visible then, or none (nil)
// when none is. The consumer's writes, the ack and the lease commit
// together, or none does; the returned message is leased only once otx
// commits. When the ack fails, it returns AckTx's error and leases
// nothing: return the error, so the consumer's writes roll back too.
func (q *Queue) AckTxAndPoll(otx *oncekv.Tx, m *Message) (*Message, error) {
	if err := q.AckTx(otx, m); err != nil {
		return nil, err
	}
	ms, err := q.receiveTx(otx, 1)
	if err != nil || len(ms) == 0 {
		return nil, q.wrap("receive", nil, err)
	}
	return ms[0], nil
}

// notReceived is the error of AckAndReceive once its ack has committed.
func (q *Queue) notReceived(err error) error {
	return &Error{Op: "receive", Queue: q.name, Err: fmt.Errorf("%w: %w", ErrNotReceived, err)}
}

// firstVisible returns when the first message of index becomes visible
// (or became: its lease's end, its visible time), in the store's Unix
// nanoseconds; noneVisible for an empty index.
func firstVisible(index *oncekv.Bucket) (int64, error) {
	k, _ := index.Cursor().First()
	if k == nil {
		return noneVisible, nil
	}
	at, _, err := parseIndexKey(k)
	return at, err
}
