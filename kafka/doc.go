// Package kafka applies Kafka records once and produces an outbox to
// Kafka, on franz-go (github.com/twmb/franz-go).
//
// A Consumer polls a consumer group, applies each poll's records with one
// oncekv ApplyBatch (one write transaction: every effect with its dedup
// mark), and only then commits the poll's offsets: effect first, offsets
// second, the article's order. A crash, a kill -9 or a lost rebalance
// between the two leaves the offsets behind; the records are delivered
// again, to this member or the partition's next owner, and the store
// answers each as a duplicate without running its effect ("duplicate
// suppressed", logged at info with partition and offset, and counted in
// Stats.Duplicates).
//
// NewSender returns a relay.Sender that produces a queue's messages with
// the idempotent producer (ProducerOpts: idempotence on, acks=all, at
// most 5 requests in flight), the message's idempotency key as the record
// key and in a header, and the fencing token in another header.
//
// # Guarantees
//
//   - At least once: an offset is committed only after the store committed
//     the records before it (or gave up on them, see Options.DeadLetter).
//   - Effectively once within the store: a record whose key (Options.Key)
//     was applied within the store's dedup window (oncekv's Retention,
//     default 7 days) is not applied again, whichever member of the group
//     it reaches, as long as they share the store.
//   - A rebalance cannot make a commit cover a partition this member lost:
//     the client must block rebalances while a poll is applied
//     (ConsumerOpts, checked by NewConsumer). A member stalled past
//     kgo.RebalanceTimeout is kicked out; its commit fails (counted in
//     Stats.CommitFailures) and the next owner gets the batch again: those
//     records are suppressed as duplicates.
//   - A record that can never succeed (no key, key reused with another
//     payload, an effect error marked oncekv.Permanent) does not block its
//     partition: it is handed to Options.DeadLetter (or logged) and its
//     offset committed. A transient failure rewinds its partition to it.
//
// # Where the guarantee ends
//
//   - At the store's edge. The effect runs in the store's transaction; a
//     call to a payment gateway or a mail server does not join it, and
//     Kafka's exactly-once (transactions, read_committed) stops at Kafka's
//     edge too. Reach such systems with oncekv's Claim, or an outbox
//     (package queue) and a relay whose far side deduplicates by key.
//   - At the store's reach. The bbolt store is one file in one process: the
//     members of a group deduplicate each other's redeliveries only when
//     they share one *oncekv.DB (several clients in one process). Members
//     in several processes, each with its own file, do not see each other's
//     marks, and a partition moved between them is applied again.
//   - At the key. Dedup is as good as the key: HeaderKey or RecordKey with
//     the operation's id (created once, by the producer) deduplicates a
//     producer's retries too; CoordinatesKey only deduplicates redeliveries
//     of one record, and breaks when a topic is re-created (offsets start
//     again at 0: new records look like old ones).
//   - At the window. A redelivery older than the store's Retention is
//     applied again.
//   - At the producer's session. The idempotent producer removes the
//     duplicates of franz-go's own retries within one producer session and
//     one partition; a process restart, or a relay retry after a timeout,
//     produces the record again (same key, new offset): the consumer's
//     store removes those.
//   - Order. Dedup does not fix reordering; the fencing token in the
//     FenceHeader lets a consumer refuse a stale write (oncekv.PutFenced).
//     A partition is applied in offset order, except past a key held by a
//     live Claim (oncekv.ErrInProgress), which later records of its
//     partition overtake.
//
// # Caveats
//
// A transient failure pauses the whole consumer (every partition of the
// client) for its backoff before the next poll; a record that fails
// transiently on every poll is given up on after the retry policy's
// MaxAttempts. The Consumer starts no goroutine of its own; Run returns
// when ctx is done, and the caller closes the client after it. Its memory
// of transient failures holds one entry per partition at most.
//
// # Tests
//
// No Kafka broker can be installed where this module is tested: its tests
// run against franz-go's own in-process Kafka-protocol cluster (kfake,
// github.com/twmb/franz-go/pkg/kfake), which speaks the wire protocol,
// consumer groups with rebalance timeouts, idempotent producers and offset
// commits. The example command (kafka/example) takes any broker address
// for a real cluster.
package kafka
