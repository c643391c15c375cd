package queue

import (
	"context"

	"github.com/oncekv/oncekv"
)

// Changed returns a channel closed at the next commit of this process
// that changes what the queue holds or where a message stands: an
// enqueue, a delivery, an ack, a nack, a defer, a dead letter, a redrive,
// a drop. Read Stats when it fires (the "3 changes waiting to sync"
// badge), then call Changed again: nothing is polled, and Stats reads
// counts, not the queue. Time passing closes nothing (a delayed message
// coming due is seen at the next read). Once the queue is closed, the
// channel is closed.
func (q *Queue) Changed() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.changed
}

// WaitDrained blocks until the queue holds no live message (Stats.Depth is
// 0: every message acked, dead-lettered or dropped), or ctx is done. Dead
// letters are not waited for: check Stats.Dead. It reads the counts at
// each change, never the queue (see Changed). Errors: ctx's,
// ErrQueueClosed, oncekv.ErrClosed, the store's.
func (q *Queue) WaitDrained(ctx context.Context) error {
	return q.waitUntil(ctx, "wait drained", func(otx *oncekv.Tx) bool {
		state := otx.Bucket(q.b.state)
		return sub0(readCounter(state, "count"), readCounter(state, "dead")) == 0
	})
}

// WaitOrderingKeyDrained blocks until nothing of orderingKey is left in
// line: no live message with the key, and no dead letter holding it
// (HoldOrderingKey), or ctx is done: "all edits of this note are synced".
// It reads the key's first entry at each change (see Changed). Errors:
// ctx's, ErrQueueClosed, oncekv.ErrClosed, the store's.
func (q *Queue) WaitOrderingKeyDrained(ctx context.Context, orderingKey string) error {
	return q.waitUntil(ctx, "wait drained", func(otx *oncekv.Tx) bool {
		_, ok, _ := orderHead(otx.Bucket(q.b.order), orderingKey)
		return !ok
	})
}

// waitUntil blocks until done holds in a read transaction, looking again
// at every change.
func (q *Queue) waitUntil(ctx context.Context, op string, done func(otx *oncekv.Tx) bool) error {
	for {
		ch := q.Changed() // before looking: a change after the look wakes the wait
		if err := q.checkOpen(); err != nil {
			return q.wrap(op, nil, err)
		}
		var ok bool
		if err := q.db.View(func(otx *oncekv.Tx) error { ok = done(otx); return nil }); err != nil {
			return q.wrap(op, nil, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return q.wrap(op, nil, ctx.Err())
		case <-q.db.Done():
			return q.wrap(op, nil, oncekv.ErrClosed)
		case <-ch:
		}
	}
}
