package oncekvtest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/oncekvtest"
	"github.com/oncekv/oncekv/queue"
)

// outboxSpec is the deposit handler with a transactional outbox: each
// deposit enqueues a notification in the same transaction
// (queue.EnqueueTx), deduplicated by the deposit's id.
func outboxSpec(snapshot func(env *oncekvtest.Env) (oncekvtest.State, error)) oncekvtest.Spec[deposit] {
	s := depositSpec()
	s.Effect = nil
	s.Open = func(env *oncekvtest.Env) (oncekvtest.Effect[deposit], error) {
		q, err := queue.Open(env.DB, "notifications", nil)
		if err != nil {
			return nil, err
		}
		env.OnClose(q.Close)
		return func(tx *oncekv.Tx, d deposit) ([]byte, error) {
			body, err := json.Marshal(d)
			if err != nil {
				return nil, err
			}
			if _, err := q.EnqueueTx(tx, queue.Message{Key: d.ID, Body: body}); err != nil {
				return nil, err
			}
			return addToBalance(tx, d)
		}, nil
	}
	s.Snapshot = snapshot
	return s
}

// outboxState is the user buckets but the queue's, and the queue's
// messages by key: what the outbox promises, without the enqueue times and
// ids that the order of the deliveries decides.
func outboxState(env *oncekvtest.Env) (oncekvtest.State, error) {
	st, err := oncekvtest.Buckets(env.DB, func(b string) bool { return !strings.HasPrefix(b, "oncekv.queue.") })
	if err != nil {
		return nil, err
	}
	q, err := queue.Open(env.DB, "notifications", nil)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	ms, err := q.Poll(context.Background(), 1000)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		st["notifications/"+m.Key] = string(m.Body)
	}
	return st, nil
}

// An outbox in the effect's transaction is idempotent: each deposit's
// notification is enqueued once, whatever the deliveries and faults.
func TestCheckPassesAnOutboxInTheTransaction(t *testing.T) {
	oncekvtest.Check(t, outboxSpec(outboxState))
}

// With the default Snapshot the queue's own records, which hold the store's
// time of each enqueue, are compared too, and the checker says the state
// depends on the clock: a Snapshot made for the handler leaves them out.
func TestCheckSeesTheQueuesClockInItsRecords(t *testing.T) {
	out := expectFailure(t, func(tb testing.TB) { oncekvtest.Check(tb, planted(outboxSpec(nil))) })
	requireCounterexample(t, out, "the state depends on the store's clock", "oncekv.queue.notifications",
		"counterexample: 1 message, 1 delivery")
}
