// Package queue is a durable local job queue inside an oncekv store: enqueue
// deduplicated by the message's idempotency key, in any write transaction
// (inside Apply's effect that is the transactional outbox); receive with a
// lease (visibility timeout) and a fencing token; ack in the consumer's own
// transaction; nack with exponential backoff and full jitter, never earlier
// than a Retry-After; dead letters after MaxAttempts or a permanent error,
// keeping the key, so a redrive cannot apply twice.
//
// # Guarantees
//
//   - Enqueue is idempotent per Key within the store's dedup window
//     (oncekv.Options.Retention): the same key returns the first message's
//     ID and enqueues nothing; the same key with another body is
//     oncekv.ErrKeyReuse. The message, its dedup mark and the caller's
//     other writes commit together or not at all.
//   - AckTx deletes the message in the consumer's own transaction: a crash
//     leaves both the consumer's writes and the ack, or neither, and the
//     message is then delivered again once its lease ends. Delivery is at
//     least once; a consumer that acks with AckTx applies each message once.
//   - Every delivery gets a fencing token greater than every earlier one of
//     the queue. Ack, Nack and Extend by a holder whose lease was taken over
//     return an error matching oncekv.ErrFenced and change nothing.
//   - Order is by visible time, then enqueue order. Messages sharing an
//     OrderingKey are delivered one at a time, in enqueue order; the next
//     becomes visible only when the one before is acked or dead-lettered.
//   - Time is the store's clock (oncekv.Options.Now): one injected clock
//     drives marks, leases, backoffs and delays. Receive's cost does not
//     grow with the queue's length: the oldest visible message is the first
//     key of an index by visible time.
//
// # Storage
//
// A queue keeps its messages in user buckets whose names start with
// "oncekv.queue." and the queue's name; do not write to them yourself.
// Enqueue marks use the handler "oncekv.queue." + name.
//
// # Caveats
//
// A key enqueued again after the dedup window is a new message. Receive
// wakes at once for enqueues, nacks and redrives committed by this process
// through this package; a message enqueued by hand in the buckets is seen
// at the next wake. Stats reads the whole index: its cost grows with the
// queue's length.
package queue
