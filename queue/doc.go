// Package queue is a durable local job queue inside an oncekv store, on the
// store's public API only: enqueue deduplicated by the message's
// idempotency key, in any write transaction (inside Apply's effect that is
// the transactional outbox); receive with a lease (visibility timeout) and
// a fencing token; ack in the consumer's own transaction; nack with
// exponential backoff and full jitter, never earlier than a Retry-After;
// dead letters after MaxAttempts or a permanent error, keeping the key, so
// a redrive cannot apply twice.
//
//   - Enqueue is idempotent per Key within the store's dedup window
//     (oncekv.Options.Retention); another body under the key is
//     oncekv.ErrKeyReuse. EnqueueTx commits with the caller's writes.
//   - AckTx deletes the message in the consumer's transaction: delivery is
//     at least once, and a consumer that acks with AckTx applies each
//     message once.
//   - AckAndReceive acks a message and leases the next in one commit: a
//     steady consumer pays one commit per message, and waits without
//     polling when none is left. AckTxAndPoll does it in the consumer's
//     transaction.
//   - Every delivery's token is greater than every earlier one; Ack, Nack
//     and Extend by a holder whose lease was taken over return an error
//     matching oncekv.ErrFenced and change nothing.
//   - Order is by visible time, then enqueue order; an OrderingKey
//     delivers its messages one at a time, in order. Time is the store's
//     clock (oncekv.Options.Now).
//
// A queue keeps its messages in user buckets named "oncekv.queue." + its
// name; do not write to them yourself. A key enqueued again after the dedup
// window is a new message. A lease left by a process that is gone is
// released at the first Open in the next one (Options.KeepOrphanedLeases);
// a dead-lettered head holds its ordering key (Options.DeadHead).
//
// Example is a producer and a consumer, ExampleQueue_EnqueueTx the outbox.
// The guide, docs/queue.md in the repository, names each guarantee's test.
package queue
