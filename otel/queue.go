package otel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// The outcomes of the queue's calls, beside the store's (fenced, aborted,
// unavailable, ...) for their errors.
const (
	OutcomeEnqueued Outcome = "enqueued" // Enqueue returned an ID: a new message's, or the first one's of its key
	OutcomeReceived Outcome = "received" // a delivery, leased
	OutcomeAcked    Outcome = "acked"
	OutcomeNacked   Outcome = "nacked" // given back for a retry, or dead-lettered (oncekv.dead_letter)
	OutcomeDeferred Outcome = "deferred"
)

// Queue is a queue whose receives, acks, nacks and enqueues record spans,
// each about its message's key (see Start for the trace it joins), so
// every delivery of a message shows in its key's trace. Every other
// method (AckTx, EnqueueTx, Stats, ...) is the queue's own, through the
// embedded *queue.Queue: AckTx and EnqueueTx run inside the caller's
// transaction and take no context, so they are part of the caller's span
// (DB.Apply's) rather than spans of their own.
type Queue struct {
	*queue.Queue
	t *Telemetry
}

// Queue returns q with spans. It holds nothing of its own.
func (t *Telemetry) Queue(q *queue.Queue) *Queue { return &Queue{Queue: q, t: t} }

// Receive is queue's Receive, with a span "oncekv.queue.receive" (kind
// Consumer) for the message it returns: from the call to the return, the
// wait included, with the queue, message ID, attempt, fencing token and
// lease's end. A Receive that ends because ctx did, or because the queue
// or store closed, records nothing: that is how a consumer stops.
func (q *Queue) Receive(ctx context.Context) (*queue.Message, error) {
	start := time.Now()
	m, err := q.Queue.Receive(ctx)
	q.received(ctx, start, err, m)
	return m, err
}

// ReceiveBatch is queue's ReceiveBatch, with one span
// "oncekv.queue.receive" per message, as Receive records them, so that each
// joins its own key's trace.
func (q *Queue) ReceiveBatch(ctx context.Context, n int) ([]*queue.Message, error) {
	start := time.Now()
	ms, err := q.Queue.ReceiveBatch(ctx, n)
	q.received(ctx, start, err, ms...)
	return ms, err
}

// Poll is queue's Poll, with one span per message as ReceiveBatch.
func (q *Queue) Poll(ctx context.Context, n int) ([]*queue.Message, error) {
	start := time.Now()
	ms, err := q.Queue.Poll(ctx, n)
	q.received(ctx, start, err, ms...)
	return ms, err
}

// received records the receive spans of ms, begun at start, or of err.
func (q *Queue) received(ctx context.Context, start time.Time, err error, ms ...*queue.Message) {
	if err != nil {
		if stopping(ctx, err) {
			return
		}
		_, span := q.t.tracer.Start(ctx, "oncekv.queue.receive", trace.WithTimestamp(start),
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(AttrQueue.String(q.Name())))
		q.t.setOutcome(span, "", OutcomeOf(oncekv.Result{}, err), oncekv.Result{}, err, time.Time{})
		span.End()
		return
	}
	for _, m := range ms {
		_, span := q.t.start(ctx, "oncekv.queue.receive", q.t.operationOf(m.Key), trace.WithTimestamp(start),
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(q.messageAttrs(m)...))
		span.SetAttributes(leaseAttr(m.LeaseUntil)...)
		span.SetAttributes(AttrOutcome.String(string(OutcomeReceived)))
		span.End()
	}
}

// stopping reports whether err is how a wait ends when its consumer stops.
func stopping(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, ctx.Err()) ||
		errors.Is(err, queue.ErrQueueClosed) || errors.Is(err, oncekv.ErrClosed)
}

// messageAttrs are the attributes of a span about delivery m.
func (q *Queue) messageAttrs(m *queue.Message) []attribute.KeyValue {
	if m == nil {
		return []attribute.KeyValue{AttrQueue.String(q.Name())}
	}
	return []attribute.KeyValue{AttrQueue.String(q.Name()), AttrMessageID.Int64(int64(min(m.ID, 1<<63-1))),
		AttrAttempt.Int(m.Attempt), tokenAttr(m.Token)}
}

// settle runs fn, one call about delivery m, in a span named name whose
// outcome is done when fn returns nil, the error's otherwise.
func (q *Queue) settle(ctx context.Context, name string, m *queue.Message, done Outcome, fn func(ctx context.Context) error) error {
	key := ""
	if m != nil {
		key = m.Key
	}
	return q.span(ctx, name, key, q.messageAttrs(m), done, fn)
}

// span runs fn in a span named name about key, with attrs, whose outcome
// is done when fn returns nil, the error's otherwise.
func (q *Queue) span(ctx context.Context, name, key string, attrs []attribute.KeyValue, done Outcome, fn func(ctx context.Context) error,
	opts ...trace.SpanStartOption) error {
	ctx, span := q.t.start(ctx, name, q.t.operationOf(key), append(opts, trace.WithAttributes(attrs...))...)
	defer span.End()
	err := fn(ctx)
	if err != nil {
		q.t.SetResult(span, key, oncekv.Result{}, err, time.Time{})
		return err
	}
	span.SetAttributes(AttrOutcome.String(string(done)))
	return nil
}

// Ack is queue's Ack in a span "oncekv.queue.ack": acked, or the error's
// outcome (fenced when another delivery took the message over).
func (q *Queue) Ack(ctx context.Context, m *queue.Message) error {
	return q.settle(ctx, "oncekv.queue.ack", m, OutcomeAcked, func(ctx context.Context) error { return q.Queue.Ack(ctx, m) })
}

// Nack is queue's Nack in a span "oncekv.queue.nack": nacked, with
// oncekv.dead_letter true when the nack dead-lettered the message (looked
// up after it, only when the span is recorded), or the error's outcome.
// The cause's message goes to the span's "oncekv.queue.nack" event, the
// key in it redacted.
func (q *Queue) Nack(ctx context.Context, m *queue.Message, cause error) error {
	return q.settle(ctx, "oncekv.queue.nack", m, OutcomeNacked, func(ctx context.Context) error {
		span := trace.SpanFromContext(ctx)
		if cause != nil && m != nil {
			span.AddEvent("oncekv.queue.nack", trace.WithAttributes(
				attrCause.String(q.t.redact(cause.Error(), m.Key)), attrPermanent.Bool(oncekv.IsPermanent(cause))))
		}
		err := q.Queue.Nack(ctx, m, cause)
		if err == nil && span.IsRecording() {
			_, lookErr := q.Queue.DeadLetter(m.ID)
			span.SetAttributes(AttrDeadLetter.Bool(lookErr == nil))
		}
		return err
	})
}

// Extend is queue's Extend in a span "oncekv.queue.extend".
func (q *Queue) Extend(ctx context.Context, m *queue.Message, d time.Duration) error {
	return q.settle(ctx, "oncekv.queue.extend", m, OutcomeExtended, func(ctx context.Context) error { return q.Queue.Extend(ctx, m, d) })
}

// Defer is queue's Defer in a span "oncekv.queue.defer".
func (q *Queue) Defer(ctx context.Context, m *queue.Message, d time.Duration) error {
	return q.settle(ctx, "oncekv.queue.defer", m, OutcomeDeferred, func(ctx context.Context) error { return q.Queue.Defer(ctx, m, d) })
}

// Enqueue is queue's Enqueue in a span "oncekv.queue.enqueue" (kind
// Producer) about m.Key, with the ID it returned (an earlier message's,
// for a key enqueued already).
func (q *Queue) Enqueue(ctx context.Context, m queue.Message) (uint64, error) {
	var id uint64
	err := q.span(ctx, "oncekv.queue.enqueue", m.Key, []attribute.KeyValue{AttrQueue.String(q.Name())}, OutcomeEnqueued,
		func(ctx context.Context) error {
			var err error
			id, err = q.Queue.Enqueue(ctx, m)
			if err == nil {
				trace.SpanFromContext(ctx).SetAttributes(AttrMessageID.Int64(int64(min(id, 1<<63-1))))
			}
			return err
		}, trace.WithSpanKind(trace.SpanKindProducer))
	return id, err
}
