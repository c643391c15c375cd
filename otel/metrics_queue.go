package otel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// queueSnapshot is what one collection reads of a queue.
type queueSnapshot struct {
	queue.Stats
	// OldestDeadAge is how long ago the oldest dead letter died (by
	// Message.DeadAt, on the store's clock): the dead-letter lag.
	OldestDeadAge time.Duration
}

func queueGauge(name, unit, desc string, value func(s *queueSnapshot) float64) spec[queueSnapshot] {
	return spec[queueSnapshot]{"oncekv.queue." + name, unit, desc, false, value}
}

func queueCounter(name, unit, desc string, value func(s *queueSnapshot) float64) spec[queueSnapshot] {
	return spec[queueSnapshot]{"oncekv.queue." + name, unit, desc, true, value}
}

// queueSpecs are the Prometheus module's queue metrics, plus the
// dead-letter lag.
var queueSpecs = []spec[queueSnapshot]{
	queueGauge("depth", "{message}", "Live messages: ready, delayed, in flight and waiting for their ordering key (dead letters are not).",
		func(s *queueSnapshot) float64 { return float64(s.Depth) }),
	queueGauge("ready", "{message}", "Messages visible now, leases that ran out included.",
		func(s *queueSnapshot) float64 { return float64(s.Ready) }),
	queueGauge("in_flight", "{message}", "Messages leased to a consumer whose lease still runs.",
		func(s *queueSnapshot) float64 { return float64(s.InFlight) }),
	queueGauge("delayed", "{message}", "Messages not visible yet: a delay, or a nack's backoff.",
		func(s *queueSnapshot) float64 { return float64(s.Delayed) }),
	queueGauge("waiting", "{message}", "Messages behind an earlier message of their ordering key.",
		func(s *queueSnapshot) float64 { return float64(s.Waiting) }),
	queueGauge("dead", "{message}", "Dead letters held, waiting for a redrive or a purge.",
		func(s *queueSnapshot) float64 { return float64(s.Dead) }),
	queueGauge("bytes", "By", "Keys and bodies held, dead letters included.",
		func(s *queueSnapshot) float64 { return float64(s.Bytes) }),
	queueGauge("oldest_visible.age", "s", "How long the oldest visible message has been visible: consumer lag. 0 when none is.",
		func(s *queueSnapshot) float64 { return s.OldestVisibleAge.Seconds() }),
	queueGauge("oldest.age", "s", "How long ago the oldest live message (waiting or in flight) was enqueued: how far behind a relay is. 0 when the queue is empty.",
		func(s *queueSnapshot) float64 { return s.OldestAge.Seconds() }),
	queueGauge("oldest_dead_letter.age", "s", "How long ago the oldest dead letter was dead-lettered: the dead-letter lag. 0 with none. "+
		"Read from at most Options.MaxDeadLetterScan dead letters, lowest IDs first: past that, a lower bound.",
		func(s *queueSnapshot) float64 { return s.OldestDeadAge.Seconds() }),
	queueCounter("enqueued", "{message}", "Messages added.",
		func(s *queueSnapshot) float64 { return float64(s.Enqueued) }),
	queueCounter("duplicates", "{message}", "Enqueues answered by an earlier message with the same key, which added nothing.",
		func(s *queueSnapshot) float64 { return float64(s.Duplicates) }),
	queueCounter("acked", "{message}", "Messages acknowledged.",
		func(s *queueSnapshot) float64 { return float64(s.Acked) }),
	queueCounter("nacked", "{message}", "Messages given back for a retry after a backoff.",
		func(s *queueSnapshot) float64 { return float64(s.Nacked) }),
	queueCounter("expired", "{lease}", "Leases that ran out before an ack or a nack: a consumer died or stalled.",
		func(s *queueSnapshot) float64 { return float64(s.Expired) }),
	queueCounter("dead_lettered", "{message}", "Messages moved to the dead letters: too many attempts, or a permanent error.",
		func(s *queueSnapshot) float64 { return float64(s.DeadLettered) }),
	queueCounter("redriven", "{message}", "Dead letters moved back to the queue.",
		func(s *queueSnapshot) float64 { return float64(s.Redriven) }),
	queueCounter("dropped", "{message}", "Messages dropped to make room (DropOldest).",
		func(s *queueSnapshot) float64 { return float64(s.Dropped) }),
}

// deadPage is how many dead letters one read transaction of the scan
// lists: their bodies are copied, up to queue's MaxBodySize each.
const deadPage = 16

// ObserveQueue reports q's Stats through the Telemetry's meter, with the
// attribute queue=q.Name() and attrs: the Prometheus module's queue
// metrics, under the same names, and oncekv.queue.oldest_dead_letter.age,
// the dead-letter lag. queue keeps no index of dead letters by age, so each
// collection lists up to Options.MaxDeadLetterScan of them (lowest ID
// first, 16 per read transaction) for the oldest DeadAt; past that bound
// the age is that of the oldest seen, a lower bound. queue.Stats reads the
// queue's whole index, so a collection costs time in proportion to the live
// messages too. A closed queue (or store) reports nothing; another error
// of Stats fails the collection's callback. Errors: ErrNilArgument; the
// meter's.
func (t *Telemetry) ObserveQueue(q *queue.Queue, attrs ...attribute.KeyValue) (metric.Registration, error) {
	if q == nil {
		return nil, fmt.Errorf("%w: nil queue", ErrNilArgument)
	}
	with := metric.WithAttributeSet(attribute.NewSet(append(slices.Clone(attrs), metricQueue.String(q.Name()))...))
	return t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var s queueSnapshot
		var err error
		s.Stats, err = q.Stats()
		switch {
		case errors.Is(err, queue.ErrQueueClosed), errors.Is(err, oncekv.ErrClosed):
			return nil
		case err != nil:
			return fmt.Errorf("oncekv: otel: queue %q: %w", q.Name(), err)
		}
		if s.Dead > 0 {
			s.OldestDeadAge, err = oldestDead(q, t.opts.MaxDeadLetterScan)
		}
		observeAll(o, t.inst.queue, &s, with)
		return err
	}, observables(t.inst.queue)...)
}

// oldestDead returns the age of the oldest of q's first limit dead letters
// by ID, by the store's clock.
func oldestDead(q *queue.Queue, limit int) (time.Duration, error) {
	var oldest time.Time
	var after uint64
	for seen := 0; seen < limit; {
		ms, err := q.DeadLetters(after, min(deadPage, limit-seen))
		if err != nil {
			return 0, fmt.Errorf("oncekv: otel: queue %q: dead letters: %w", q.Name(), err)
		}
		for _, m := range ms {
			if oldest.IsZero() || m.DeadAt.Before(oldest) {
				oldest = m.DeadAt
			}
			after = m.ID
		}
		seen += len(ms)
		if len(ms) < deadPage {
			break
		}
	}
	if oldest.IsZero() {
		return 0, nil
	}
	return max(q.DB().Now().Sub(oldest), 0), nil
}
