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
//     becomes visible only when the one before is acked, or, when it is
//     dead-lettered, once it is redriven (back at the head, with its ID)
//     and acked, or deleted (Options.DeadHead: HoldOrderingKey by
//     default; PassOrderingKey lets the next through at once).
//   - A lease left by a process that is gone is released when the queue
//     is first opened in the next one (Options.KeepOrphanedLeases): the
//     message is visible at once, and its interrupted delivery counts
//     toward MaxAttempts, so one that crashes its consumer every time is
//     dead-lettered, never looping.
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
// # Seeing and steering
//
// Stats reads counts kept in the same transactions as the writes; Changed
// and WaitDrained (WaitOrderingKeyDrained for one key) wake at each change
// without polling: the "3 changes waiting to sync" badge and the "all
// synced" tick. Messages, DeadLetters and View.OrderingKeys list what is in
// line; Redrive and DeleteDead steer it. NewView and Names read a queue
// without opening it (a read-only store, or one open here with other
// options), and View.Check compares every count with a scan. The oncekv
// command does all of it from outside: queues, messages, dead, redrive,
// dead-delete.
//
// # Caveats
//
// A key enqueued again after the dedup window is a new message. Receive
// wakes at once for enqueues, nacks and redrives committed by this process
// through this package; a message enqueued by hand in the buckets is seen
// at the next wake.
package queue
