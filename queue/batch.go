package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/oncekv/oncekv"
)

// maxBatch caps how many operations share one transaction.
const maxBatch = 256

// errRetryBatch rolls a shared transaction back so it can run again
// without the operation that failed.
var errRetryBatch = errors.New("oncekv: queue: retry the batch without the failed operation")

// batcher runs concurrent Receives and Acks of a queue in shared write
// transactions, so that 8 consumers pay for about one fsync per round
// instead of 8. The first caller to arrive when no transaction is running
// leads: it takes every operation queued so far, runs them in one
// transaction and wakes their callers; operations that arrive meanwhile
// queue up, and the leader hands the lead to the first of them. A lone
// caller never waits.
//
// bbolt has no savepoints: when one operation fails, the transaction rolls
// back and runs again without it, so every fn must be safe to run again
// (each writes only through its tx and overwrites its results). fns are
// the queue's own code, never the user's: a user callback must not run in
// another caller's goroutine.
type batcher struct {
	// run runs fn in one write transaction (DB.Update); injected so the
	// batcher is tested without a store.
	run func(fn func(otx *oncekv.Tx) error) error

	mu      sync.Mutex
	queue   []*batchOp
	leading bool
}

type batchOp struct {
	ctx  context.Context
	fn   func(otx *oncekv.Tx) error
	err  error
	wake chan bool // true: done; false: lead the next batch
}

// do runs fn in a transaction shared with other callers, and returns its
// error or the commit's. If ctx is done while fn is still queued, fn never
// runs and do returns ctx's error; once fn is in a transaction, do waits
// for that transaction's end.
func (b *batcher) do(ctx context.Context, fn func(otx *oncekv.Tx) error) error {
	op := &batchOp{ctx: ctx, fn: fn, wake: make(chan bool, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, op)
	if b.leading {
		b.mu.Unlock()
		lead, err := b.waitTurn(op)
		if !lead {
			return err
		}
		b.mu.Lock()
	} else {
		b.leading = true
	}
	b.leadLocked(op)
	return op.err
}

// waitTurn waits until op is done (false) or is to lead the next batch
// (true), or withdraws op when ctx is done first.
func (b *batcher) waitTurn(op *batchOp) (lead bool, err error) {
	select {
	case done := <-op.wake:
		return !done, op.err
	case <-op.ctx.Done():
	}
	b.mu.Lock()
	i := slices.Index(b.queue, op)
	if i < 0 {
		b.mu.Unlock()
		// Taken into a transaction: its end is near.
		done := <-op.wake
		return !done, op.err
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	select {
	case <-op.wake: // promoted just now: hand the lead on
		b.handOnLocked()
	default:
	}
	b.mu.Unlock()
	return false, op.ctx.Err()
}

// leadLocked runs batches until op's is done, then hands the lead on. The
// caller holds b.mu; leadLocked releases it.
func (b *batcher) leadLocked(op *batchOp) {
	for {
		n := min(len(b.queue), maxBatch)
		batch := slices.Clone(b.queue[:n])
		b.queue = slices.Delete(b.queue, 0, n)
		b.mu.Unlock()
		b.commit(batch)
		mine := false
		for _, o := range batch {
			if o == op {
				mine = true
				continue
			}
			o.wake <- true
		}
		b.mu.Lock()
		if mine {
			break
		}
	}
	b.handOnLocked()
	b.mu.Unlock()
}

// handOnLocked gives the lead to the first queued operation, if any.
func (b *batcher) handOnLocked() {
	if len(b.queue) > 0 {
		b.queue[0].wake <- false
		return
	}
	b.leading = false
}

// commit runs the batch in one transaction, again without any operation
// that fails, and sets every operation's error.
func (b *batcher) commit(batch []*batchOp) {
	defer func() {
		// No user code runs here, so a panic is a bug; waiters must not
		// hang on it.
		if r := recover(); r != nil {
			for _, o := range batch {
				if o.err == nil {
					o.err = fmt.Errorf("oncekv: queue: panic in a shared transaction: %v", r)
				}
			}
		}
	}()
	pending := slices.Clone(batch) // DeleteFunc below must not touch batch
	for len(pending) > 0 {
		var failed *batchOp
		err := b.run(func(otx *oncekv.Tx) error {
			for _, o := range pending {
				err := o.ctx.Err()
				if err == nil {
					err = o.fn(otx)
				}
				if err != nil {
					failed, o.err = o, err
					return errRetryBatch
				}
			}
			return nil
		})
		if failed != nil && errors.Is(err, errRetryBatch) {
			pending = slices.DeleteFunc(pending, func(o *batchOp) bool { return o == failed })
			continue
		}
		for _, o := range pending {
			o.err = err
		}
		return
	}
}
