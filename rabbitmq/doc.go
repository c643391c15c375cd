// Package rabbitmq is oncekv behind RabbitMQ (github.com/rabbitmq/amqp091-go):
// a Consumer that applies each delivery's effect once through the store,
// and a Publisher whose Send is a relay.Sender with publisher confirms.
//
// RabbitMQ delivers at least once: a consumer that dies before its ack, a
// channel lost in a broker restart, a producer that publishes again after
// a lost confirm all make one message arrive twice, and only the first of
// the copies a consumer's crash leaves behind is marked Redelivered. The
// Consumer does not trust that flag: every delivery goes through the
// store's marks, keyed by the producer's idempotency key (the message_id,
// or a header you name), and the effect commits in the same transaction as
// the mark.
//
// # The consumer
//
// Run consumes with manual acks and a prefetch count. Up to Prefetch
// deliveries make one batch, applied with one ApplyBatch (one commit, one
// fsync); only after the commit is each delivery settled by its own
// result (Judge): acked when applied or a duplicate, held and then nacked
// with requeue when a retry can succeed (a full-jitter backoff, or the end
// of a claim's lease), nacked without requeue (to the queue's dead-letter
// exchange, which Run declares) when none can: a permanent failure, a key
// reused with another body, a delivery without a key, attempts exhausted.
// A lost connection is dialled again; what it held unacknowledged comes
// back, and is answered from the marks.
//
// # The publisher
//
// Send publishes persistent, mandatory, on a channel in confirm mode, with
// the message's idempotency key as message_id and its fencing token in a
// header (Oncekv-Fence), and returns nil only once the broker confirmed the
// publish. A nack, a return (no queue bound), a lost connection are errors,
// so the relay keeps the message and sends it again.
//
// # Where the guarantee ends
//
//   - Effectively once, not exactly once: an effect is applied once per
//     (Handler, key) within the store's dedup window (Options.Retention);
//     a copy that arrives after the window is applied again. The effect
//     may run more than once and must change nothing outside its
//     transaction: a call to another system from inside it is at least
//     once (use a claim, or an outbox: package queue and relay).
//   - The key is the producer's: two publishes of one logical message must
//     carry the same message_id (the relay's messages do); a producer that
//     mints a new id per retry defeats every dedup.
//   - The boundary is the store's file. The dead-letter queue, the
//     requeues and the acks are RabbitMQ's, at least once: a dead letter
//     can be redelivered by a shovel or by hand, and the store answers it
//     from its mark (FAILED, or DONE), never applying it twice.
//   - Order is not kept: a requeued or redelivered message comes after
//     those that passed it. Order what must be ordered with fencing
//     tokens or versions (the Publisher hands the token to the far side).
//   - A confirm means the broker has the message (on disk, for a durable
//     queue); what an unclustered broker loses with its disk is lost. A
//     publish whose confirm was lost is sent again: the consumer gets two
//     copies and applies one.
//   - Attempts of transient failures are counted by RabbitMQ in quorum
//     queues (x-delivery-count), in the Consumer's memory otherwise: a
//     restart starts that count again.
package rabbitmq
