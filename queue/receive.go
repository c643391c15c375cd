package queue

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/oncekv/oncekv"
)

// Receive takes the oldest visible message and leases it for the queue's
// Visibility, with a fresh fencing token. It blocks until a message is
// visible or ctx is done: an enqueue, nack or redrive committed in this
// process wakes it at once, and a delayed message (or a lease running out)
// at its time, by a timer on the store's clock, without polling.
//
// A message whose lease ran out (or was released at Open, its process
// gone) is delivered again with Attempt one higher; one that had
// MaxAttempts deliveries already is dead-lettered instead, with LastError
// saying its lease ran out (or its attempt was interrupted).
//
// Errors: ctx's error, ErrQueueClosed, oncekv.ErrClosed when the store is
// closed (a blocked Receive returns it as Close begins), oncekv.ErrReadOnly,
// the store's errors; each names the queue.
func (q *Queue) Receive(ctx context.Context) (*Message, error) {
	ms, err := q.ReceiveBatch(ctx, 1)
	if err != nil {
		return nil, err
	}
	return ms[0], nil
}

// ReceiveBatch is Receive for up to n messages, leased in one transaction
// (one commit): it blocks until at least one is visible, and returns those
// visible then, oldest first. n must be positive.
func (q *Queue) ReceiveBatch(ctx context.Context, n int) ([]*Message, error) {
	if n <= 0 {
		return nil, q.wrap("receive", nil, fmt.Errorf("%w: batch size %d", ErrInvalidOptions, n))
	}
	if err := q.checkWritable(); err != nil {
		return nil, q.wrap("receive", nil, err)
	}
	ms, err := q.receiveLoop(ctx, n)
	return ms, q.wrap("receive", nil, err)
}

// receiveLoop is ReceiveBatch's loop, once n is checked: look, and wait
// for a wake-up or a visible time when nothing was visible.
func (q *Queue) receiveLoop(ctx context.Context, n int) ([]*Message, error) {
	for {
		// Take the wake channel before looking, so an enqueue committed
		// after the look wakes this wait.
		wake, err := q.waitChan()
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ms, next, err := q.tryReceive(ctx, n)
		if err != nil || len(ms) > 0 {
			return ms, err
		}
		if err := q.wait(ctx, wake, next); err != nil {
			return nil, err
		}
	}
}

// Poll is ReceiveBatch without the wait: it leases up to n messages
// visible now, and returns none at once when none is.
func (q *Queue) Poll(ctx context.Context, n int) ([]*Message, error) {
	if n <= 0 {
		return nil, q.wrap("receive", nil, fmt.Errorf("%w: batch size %d", ErrInvalidOptions, n))
	}
	if err := q.checkWritable(); err != nil {
		return nil, q.wrap("receive", nil, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, q.wrap("receive", nil, err)
	}
	ms, _, err := q.tryReceive(ctx, n)
	return ms, q.wrap("receive", nil, err)
}

// wait blocks until wake is closed, the store's clock reaches at on the
// queue's timer (noneVisible: no timer), ctx is done or the store begins
// to close (oncekv.ErrClosed).
//
// The timer takes a duration, counted from when it is set, so the clock
// is read again around setting it: an injected clock moved on between
// the look and the timer would otherwise set it late, past at, and a
// message that became visible would wait for the clock's next move (a
// lost wake-up). A move of over a millisecond sets the timer again; a
// real clock's few microseconds between the reads make a timer late by
// as much, which nobody can tell.
func (q *Queue) wait(ctx context.Context, wake <-chan struct{}, at int64) error {
	var timer <-chan time.Time
	for at != noneVisible {
		before := q.db.Now().UnixNano()
		if at <= before {
			return nil // visible already: look again
		}
		c, stop := q.opts.Timer(time.Duration(at - before))
		if q.db.Now().UnixNano()-before > int64(time.Millisecond) {
			stop()
			continue
		}
		defer stop()
		timer = c
		break
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-q.db.Done():
		return oncekv.ErrClosed
	case <-wake:
	case <-timer:
	}
	return nil
}

// What tryReceive returns for when to look next, besides a time:
// noneVisible is "no message at all" (wait for a wake only), lookAgain is
// "at once" (another receiver took what was visible).
const (
	noneVisible = math.MinInt64
	lookAgain   = math.MinInt64 + 1
)

// tryReceive leases up to n visible messages. When none is visible it
// returns when the next one becomes visible, in the store's Unix
// nanoseconds (noneVisible: no message), having taken no write
// transaction; lookAgain after a lease that found nothing left.
func (q *Queue) tryReceive(ctx context.Context, n int) ([]*Message, int64, error) {
	next := int64(noneVisible)
	visible := false
	// Look in a read transaction first: an idle queue costs no commit.
	err := q.db.View(func(otx *oncekv.Tx) (err error) {
		next, err = firstVisible(otx.Bucket(q.b.index))
		visible = err == nil && next != noneVisible && next <= otx.Now().UnixNano()
		return err
	})
	if err != nil || !visible {
		return nil, next, err
	}
	var ms []*Message
	// Shared with concurrent receivers and acks: one commit for all.
	err = q.batch.do(ctx, func(otx *oncekv.Tx) (err error) {
		ms, err = q.receiveTx(otx, n)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	// Another receiver may have been first: look again.
	return ms, lookAgain, nil
}

// receiveTx leases up to n visible messages in otx.
func (q *Queue) receiveTx(otx *oncekv.Tx, n int) ([]*Message, error) {
	t, err := q.begin(otx)
	if err != nil {
		return nil, err
	}
	if err := t.foldDue(); err != nil {
		return nil, err
	}
	var ms []*Message
	maxAttempts := q.retrier.Policy().MaxAttempts
	for len(ms) < n {
		// First again each time: the leased message moved to its lease's
		// end, so the next visible one is first now.
		k, _ := t.index.Cursor().First()
		if k == nil {
			break
		}
		at, id, err := parseIndexKey(k)
		if err != nil {
			return nil, err
		}
		if at > t.now {
			break
		}
		r, err := t.get(t.msgs, id)
		if err != nil {
			return nil, err
		}
		if r == nil {
			return nil, fmt.Errorf("%w: index entry of message %d, which is missing", oncekv.ErrCorrupt, id)
		}
		if r.LeaseUntil != 0 {
			// The lease ran out before an ack or nack.
			q.countOnCommit(otx, &q.counters.expired)
			if !r.Interrupted {
				r.LastError = fmt.Sprintf("lease of attempt %d ran out", r.Attempt)
			}
			r.Interrupted = false
			if maxAttempts > 0 && r.Attempt >= maxAttempts {
				if err := t.bury(id, r); err != nil {
					return nil, err
				}
				continue
			}
		}
		token, err := otx.NextFence(q.fence)
		if err != nil {
			return nil, err
		}
		r.Attempt++
		r.Token = token
		r.LeaseUntil = later(t.now, q.opts.Visibility)
		if err := t.setVisible(id, r, r.LeaseUntil, true); err != nil {
			return nil, err
		}
		m := r.message(id)
		m.queue = q.name
		ms = append(ms, m)
	}
	return ms, nil
}
