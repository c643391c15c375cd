// Package watermill is oncekv as a Watermill handler middleware
// (github.com/ThreeDotsLabs/watermill): each message's handler runs inside
// the store's write transaction, and its effect commits with the message's
// dedup mark, so a message delivered again (by any Pub/Sub: AMQP, Kafka,
// SQL, the in-memory gochannel) is answered from the mark, without running
// the handler.
//
// Add Middleware to a Router (after a poison queue, see IsPoison), and
// write the handler as a TxHandler adapted by HandlerFunc, or read the
// transaction with Tx(msg): Example shows the whole of it on the
// in-memory Pub/Sub.
//
// The key is the message's UUID, or a metadata field you name; the dedup
// scope is the Router's handler name (or Options.Handler). The handler
// reaches the transaction with Tx(msg), or gets it as an argument through
// HandlerFunc. The messages it returns are stored with the mark: a
// duplicate returns them again, with the same UUIDs, so the Router
// publishes them at least once and the next consumer deduplicates them.
//
// # Ack, nack, poison
//
// The middleware returns nil (the Router acks) for an applied message and
// for a duplicate; a *PoisonError for what no retry can fix (oncekv.Classify
// says GiveUp: a permanent failure, a key reused with another payload, no
// key); and any other error as it is, for the Router to nack and the
// subscriber to redeliver (put Watermill's Retry middleware before it for
// in-process backoff). Route poison to a topic of its own with
// middleware.PoisonQueueWithFilter(pub, topic, IsPoison), added before this
// middleware.
//
// # Where the guarantee ends
//
//   - Effectively once within the store's file and dedup window
//     (oncekv.Options.Retention): a copy that arrives after the window runs
//     the handler again.
//   - Only the writes through the transaction are once. The handler may run
//     more than once for one message (a failure rolls it back, a shared
//     commit may run it again); anything else it does, an HTTP call, a
//     write to another database, a publish of its own, is at least once.
//     Return the messages to publish instead, or use a claim or an outbox.
//   - The messages it returns are published by the Router after the
//     commit, at least once: a crash before the publish leaves the message
//     unacked, and its redelivery publishes the stored ones.
//   - The key must be stable: Watermill's publishers keep the UUID a
//     producer gave, so a producer that retries with the same message
//     keeps the key; one that calls watermill.NewUUID per retry defeats the
//     dedup (name a metadata field with a business key instead).
//   - Order is the Pub/Sub's: a redelivery may come after later messages.
package watermill
