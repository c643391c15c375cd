package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/retry"
)

// errNacked stands for the cause of a Nack given none.
var errNacked = errors.New("nacked without a cause")

// AckTx deletes m, the message of this delivery, inside otx: the
// consumer's own writes and the ack commit together, or neither does.
// Once the lease was taken over by another delivery (or the message is
// gone), it returns an error matching oncekv.ErrFenced and writes nothing:
// return it, so the consumer's writes roll back too.
func (q *Queue) AckTx(otx *oncekv.Tx, m *Message) error {
	return q.wrap("ack", m, q.held(otx, m, func(t *tx, r *record) error {
		if err := t.remove(m.ID, r, false); err != nil {
			return err
		}
		q.countOnCommit(otx, &q.counters.acked)
		return nil
	}))
}

// Ack deletes m; see AckTx. Concurrent Acks and Receives share commits.
func (q *Queue) Ack(ctx context.Context, m *Message) error {
	if err := ctx.Err(); err != nil {
		return q.wrap("ack", m, err)
	}
	return q.wrap("ack", m, q.batch.do(ctx, func(otx *oncekv.Tx) error { return q.AckTx(otx, m) }))
}

// Nack gives m back after a failed attempt. A cause that is permanent
// (oncekv.Permanent or retry.Permanent), or a failed attempt that was the
// policy's MaxAttempts, dead-letters the message now, with cause's message
// as LastError. Otherwise it becomes visible again after the policy's
// backoff (full jitter), never earlier than cause's Retry-After (see
// retry.After), and that time is stored with the message, so it holds
// across restarts. A cause that is ctx's own error while ctx is done
// releases the message at once, as it was. nil is a transient cause.
//
// cause.Error() is called in the caller's goroutine. Errors: an error
// matching oncekv.ErrFenced (nothing changed) when the lease was taken
// over; ctx's error; ErrQueueClosed.
func (q *Queue) Nack(ctx context.Context, m *Message, cause error) error {
	if cause == nil {
		cause = errNacked
	}
	msg := cause.Error()
	if oncekv.IsPermanent(cause) {
		// The store's mark of a permanent error is the retry package's too.
		cause = retry.Permanent(cause)
	}
	uctx := ctx
	if err := ctx.Err(); err != nil && errors.Is(cause, err) {
		// Giving the message back because ctx is done must not be
		// refused for that very reason.
		uctx = context.WithoutCancel(ctx)
	}
	return q.update(uctx, "nack", m, func(otx *oncekv.Tx) error {
		return q.held(otx, m, func(t *tx, r *record) error {
			d := q.retrier.Decide(ctx, r.Attempt, cause, time.Unix(0, t.now))
			if d.Reason != retry.ReasonCanceled {
				r.LastError = msg
			}
			q.countOnCommit(otx, &q.counters.nacked)
			if d.DeadLetter() {
				return t.bury(m.ID, r)
			}
			r.LeaseUntil = 0
			otx.OnCommit(q.wakeAll)
			// From Delay, not At: At.UnixNano is undefined past 2262.
			return t.setVisible(m.ID, r, later(t.now, d.Delay), false)
		})
	})
}

// Extend moves the end of m's lease to d from now (by the store's clock),
// and sets m.LeaseUntil. Errors: ErrInvalidDuration for d <= 0; an error
// matching oncekv.ErrFenced (nothing changed) when the lease was taken
// over; ctx's error; ErrQueueClosed.
func (q *Queue) Extend(ctx context.Context, m *Message, d time.Duration) error {
	if d <= 0 {
		return q.wrap("extend", m, fmt.Errorf("%w: %v", ErrInvalidDuration, d))
	}
	if err := ctx.Err(); err != nil {
		return q.wrap("extend", m, err)
	}
	var until int64
	err := q.batch.do(ctx, func(otx *oncekv.Tx) error {
		return q.held(otx, m, func(t *tx, r *record) error {
			until = later(t.now, d)
			r.LeaseUntil = until
			return t.setVisible(m.ID, r, until, true)
		})
	})
	if err == nil {
		m.LeaseUntil = time.Unix(0, until)
	}
	return q.wrap("extend", m, err)
}

// update runs fn in its own write transaction, once ctx is checked.
func (q *Queue) update(ctx context.Context, op string, m *Message, fn func(otx *oncekv.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return q.wrap(op, m, err)
	}
	return q.wrap(op, m, q.db.Update(func(otx *oncekv.Tx) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(otx)
	}))
}

// held runs fn on m's record if m's delivery still holds its lease (the
// lease may have run out, as long as nobody took the message since).
func (q *Queue) held(otx *oncekv.Tx, m *Message, fn func(t *tx, r *record) error) error {
	if m == nil {
		return ErrNoMessage
	}
	if err := q.checkWritable(); err != nil {
		return err
	}
	if m.queue != "" && m.queue != q.name {
		return fmt.Errorf("%w: the message was delivered by queue %q", oncekv.ErrFenced, m.queue)
	}
	t, err := q.begin(otx)
	if err != nil {
		return err
	}
	r, err := t.get(t.msgs, m.ID)
	switch {
	case err != nil:
		return err
	case r == nil:
		return fmt.Errorf("%w: the message is gone (acked, dead-lettered or dropped)", oncekv.ErrFenced)
	case r.Key != m.Key:
		return fmt.Errorf("%w: message %d has key %q, not this one", oncekv.ErrFenced, m.ID, clip(r.Key))
	case r.Token > m.Token:
		return &oncekv.FenceError{Stored: r.Token, Presented: m.Token}
	case r.Token != m.Token || r.LeaseUntil == 0:
		return fmt.Errorf("%w: the delivery was already nacked", oncekv.ErrFenced)
	}
	return fn(t, r)
}

// bury moves live message id to the dead letters. With HoldOrderingKey,
// its entry in .g stays: the key's later messages wait for a redrive or a
// delete of this one.
func (t *tx) bury(id uint64, r *record) error {
	// Dead letters count toward the bounds like live messages: take it
	// out of the live set without its accounting, then put it in.
	hold := r.Order != "" && t.q.opts.DeadHead == HoldOrderingKey
	if err := t.remove(id, r, hold); err != nil {
		return err
	}
	if err := t.account(1, r.size()); err != nil {
		return err
	}
	if err := t.addDead(1); err != nil {
		return err
	}
	r.VisibleAt, r.LeaseUntil, r.DeadAt = 0, 0, t.now
	t.q.countOnCommit(t.otx, &t.q.counters.deadLettered)
	return t.put(t.dead, id, r)
}

// Defer gives m back unsent, visible again after d, without counting its
// delivery: the next delivery has m's Attempt again, so a message held
// back (by a relay's retry budget, say) does not move toward MaxAttempts
// nor the dead letters. LastError is kept. Use it only when the attempt
// was not made; a failed attempt is a Nack. Errors: ErrInvalidDuration
// for a negative d; an error matching oncekv.ErrFenced (nothing changed)
// when the lease was taken over; ctx's error; ErrQueueClosed.
func (q *Queue) Defer(ctx context.Context, m *Message, d time.Duration) error {
	if d < 0 {
		return q.wrap("defer", m, fmt.Errorf("%w: delay %v is negative", ErrInvalidDuration, d))
	}
	return q.update(ctx, "defer", m, func(otx *oncekv.Tx) error {
		return q.held(otx, m, func(t *tx, r *record) error {
			// Receive counted this delivery; it never reached anyone.
			r.Attempt = max(r.Attempt-1, 0)
			r.LeaseUntil = 0
			otx.OnCommit(q.wakeAll)
			return t.setVisible(m.ID, r, later(t.now, d), false)
		})
	})
}
