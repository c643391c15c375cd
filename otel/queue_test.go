package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	oncekvotel "github.com/oncekv/oncekv/otel"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// TestQueueDeliveriesOfOneMessageJoinOneTrace follows one message through
// a consumer: enqueued, received, nacked, received again, applied and
// acked. Every span is in the key's trace, with the attempt and the token
// of its delivery.
func TestQueueDeliveriesOfOneMessageJoinOneTrace(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	q := r.tel.Queue(s.queue(t, "jobs", &queue.Options{Retry: &retry.Policy{Base: time.Second, Cap: time.Second}}))
	db := r.tel.DB(s.db)
	ctx := context.Background()
	key := keyLike(3)

	id, err := q.Enqueue(ctx, queue.Message{Key: key, Body: []byte("job")})
	require.NoError(t, err)
	again, err := q.Enqueue(ctx, queue.Message{Key: key, Body: []byte("job")})
	require.NoError(t, err)
	require.Equal(t, id, again)

	m1, err := q.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, q.Nack(ctx, m1, errors.New("db down while handling "+key)))
	s.clock.Advance(time.Second)
	m2, err := q.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, m2.Attempt)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "jobs", Key: m2.Key, Payload: m2.Body}, func(tx *oncekv.Tx) ([]byte, error) {
		return nil, q.AckTx(tx, m2) // the ack in the consumer's own transaction
	})
	require.NoError(t, err)
	require.ErrorIs(t, q.Ack(ctx, m2), oncekv.ErrFenced, "acked already by AckTx")

	for _, sp := range r.spans.Ended() {
		require.Equal(t, r.tel.TraceID(key), sp.SpanContext().TraceID(), "%s is in the key's trace", sp.Name())
	}
	enq := r.ended("oncekv.queue.enqueue")
	require.Len(t, enq, 2)
	require.Equal(t, int64(id), attrs(enq[1])[oncekvotel.AttrMessageID].AsInt64(), "a duplicate enqueue names the first message")
	recv := r.ended("oncekv.queue.receive")
	require.Len(t, recv, 2)
	for i, m := range []*queue.Message{m1, m2} {
		a := attrs(recv[i])
		require.Equal(t, "jobs", a[oncekvotel.AttrQueue].AsString())
		require.Equal(t, int64(m.Attempt), a[oncekvotel.AttrAttempt].AsInt64())
		require.Equal(t, int64(m.Token), a[oncekvotel.AttrToken].AsInt64())
		require.Equal(t, int64(m.ID), a[oncekvotel.AttrMessageID].AsInt64())
		require.Equal(t, "received", a[oncekvotel.AttrOutcome].AsString())
	}
	nack := r.one(t, "oncekv.queue.nack")
	require.Equal(t, "nacked", str(nack, oncekvotel.AttrOutcome))
	require.False(t, attrs(nack)[oncekvotel.AttrDeadLetter].AsBool())
	require.True(t, hasEvent(nack, "oncekv.queue.nack"))
	ack := r.one(t, "oncekv.queue.ack")
	require.Equal(t, "fenced", str(ack, oncekvotel.AttrOutcome))
	require.Equal(t, int64(2), attrs(ack)[oncekvotel.AttrAttempt].AsInt64())
	requireNoKey(t, r, key)
}

func TestQueueNackThatDeadLettersSaysSo(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	q := r.tel.Queue(s.queue(t, "jobs", nil))
	ctx := context.Background()
	_, err := q.Enqueue(ctx, queue.Message{Key: "k", Body: []byte("x")})
	require.NoError(t, err)
	m, err := q.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, q.Extend(ctx, m, time.Minute))
	require.NoError(t, q.Nack(ctx, m, retry.Permanent(errors.New("malformed"))))
	nack := r.one(t, "oncekv.queue.nack")
	require.True(t, attrs(nack)[oncekvotel.AttrDeadLetter].AsBool())
	require.Equal(t, "extended", str(r.one(t, "oncekv.queue.extend"), oncekvotel.AttrOutcome))
}

func TestQueueReceiveThatStopsRecordsNothing(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	q := r.tel.Queue(s.queue(t, "jobs", nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := q.Receive(ctx)
	require.ErrorIs(t, err, context.Canceled)
	_, err = q.ReceiveBatch(ctx, 5)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, r.spans.Ended(), "a consumer stopping is no event")

	_, err = q.ReceiveBatch(context.Background(), 0)
	require.Error(t, err)
	sp := r.one(t, "oncekv.queue.receive")
	require.Equal(t, "jobs", str(sp, oncekvotel.AttrQueue))
	require.NotEqual(t, "received", str(sp, oncekvotel.AttrOutcome))
}

func TestQueueBatchReceiveGivesEachMessageItsOwnTrace(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	q := r.tel.Queue(s.queue(t, "jobs", nil))
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		_, err := q.Queue.Enqueue(ctx, queue.Message{Key: k, Body: []byte(k)})
		require.NoError(t, err)
	}
	ms, err := q.Poll(ctx, 2)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	ms2, err := q.ReceiveBatch(ctx, 5)
	require.NoError(t, err)
	require.Len(t, ms2, 1)
	recv := r.ended("oncekv.queue.receive")
	require.Len(t, recv, 3)
	for i, k := range []string{"a", "b", "c"} {
		require.Equal(t, r.tel.TraceID(k), recv[i].SpanContext().TraceID())
	}
	require.NoError(t, q.Defer(ctx, ms2[0], time.Second))
	deferred := r.one(t, "oncekv.queue.defer")
	require.Equal(t, "deferred", str(deferred, oncekvotel.AttrOutcome))
	require.Equal(t, r.tel.TraceID("c"), deferred.SpanContext().TraceID())
}
