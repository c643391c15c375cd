package rabbitmq

import "sync/atomic"

// Stats are a Consumer's counters since NewConsumer. A duplicate counted
// here is a delivery the store answered without running the effect: at
// least once delivery makes some, and zero over a long run means the keys
// do not deduplicate, more likely than that none came twice.
type Stats struct {
	Deliveries   uint64 // deliveries received
	Redelivered  uint64 // of them, marked redelivered by RabbitMQ
	Applied      uint64 // acked after their effect committed
	Duplicates   uint64 // acked as duplicates, the effect not run again
	Requeued     uint64 // nacked with requeue, at once or after a delay
	DeadLettered uint64 // nacked without requeue, to the dead-letter exchange
	Batches      uint64 // ApplyBatch calls
	Reconnects   uint64 // connections or channels lost and dialled again
}

// Sub returns s - old, counter by counter: the activity between two
// calls of Stats.
func (s Stats) Sub(old Stats) Stats {
	return Stats{
		Deliveries:   s.Deliveries - old.Deliveries,
		Redelivered:  s.Redelivered - old.Redelivered,
		Applied:      s.Applied - old.Applied,
		Duplicates:   s.Duplicates - old.Duplicates,
		Requeued:     s.Requeued - old.Requeued,
		DeadLettered: s.DeadLettered - old.DeadLettered,
		Batches:      s.Batches - old.Batches,
		Reconnects:   s.Reconnects - old.Reconnects,
	}
}

// counters are the atomics behind Stats.
type counters struct {
	deliveries, redelivered, applied, duplicates atomic.Uint64
	requeued, deadLettered, batches, reconnects  atomic.Uint64
}

// Stats returns the consumer's counters; it is safe to call while Run
// runs.
func (c *Consumer) Stats() Stats {
	return Stats{
		Deliveries:   c.c.deliveries.Load(),
		Redelivered:  c.c.redelivered.Load(),
		Applied:      c.c.applied.Load(),
		Duplicates:   c.c.duplicates.Load(),
		Requeued:     c.c.requeued.Load(),
		DeadLettered: c.c.deadLettered.Load(),
		Batches:      c.c.batches.Load(),
		Reconnects:   c.c.reconnects.Load(),
	}
}
