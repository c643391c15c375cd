// Package sqs applies Amazon SQS messages once and sends an outbox to SQS,
// on the AWS SDK for Go v2 (github.com/aws/aws-sdk-go-v2/service/sqs).
//
// A Consumer receives up to 10 messages, applies them with one oncekv
// ApplyBatch (one write transaction: every effect with its dedup mark),
// and only then deletes them with DeleteMessageBatch. While the batch is
// being applied a heartbeat extends the messages' visibility timeout, so a
// long batch is not handed to another consumer halfway; it stops, and is
// waited for, on every exit path. A crash or a kill -9 before the delete
// leaves the messages to come back when their visibility ends; the store
// answers each as a duplicate without running its effect ("duplicate
// suppressed", logged at info, counted in Stats.Duplicates), and deletes
// it.
//
// NewSender returns a relay.Sender that sends a queue's messages with the
// idempotency key in a message attribute (Idempotency-Key) and the fencing
// token in another (Oncekv-Fence); on a FIFO queue the key is also the
// MessageDeduplicationId and the message's OrderingKey the MessageGroupId.
//
// # Guarantees
//
//   - At least once: a message is deleted only after the store committed
//     it. A delete that fails (wholly or per entry: DeleteMessageBatch's
//     partial failures, retried once when SQS's side failed) costs a
//     duplicate, suppressed when the message comes back.
//   - Effectively once within the store: a message whose key (Options.Key)
//     was applied within the store's dedup window (oncekv's Retention,
//     default 7 days) is not applied again, whichever consumer receives it,
//     as long as they share the store.
//   - Permanent failures are left to the queue's redrive policy: a message
//     with no key, a key over the store's limit, a key reused with another
//     payload, or an effect error marked oncekv.Permanent is not deleted;
//     its failure is recorded, each later receive is answered from the
//     store without running the effect, and after maxReceiveCount receives
//     SQS moves it to the dead-letter queue, with its attributes (its
//     key). Configure a RedrivePolicy: without one such a message comes
//     back every visibility timeout until the queue's retention drops it.
//   - A failure a retry can fix sets the message's visibility to the retry
//     policy's backoff for its receive count, so it comes back after that,
//     not after the full visibility timeout.
//
// # Where the guarantee ends
//
//   - At the store's edge: the effect runs in the store's transaction; a
//     call to another system does not join it (use oncekv's Claim, or an
//     outbox and a far side that deduplicates by key).
//   - At the store's reach: the bbolt store is one file in one process.
//     Consumers deduplicate each other only when they share one
//     *oncekv.DB; consumers in several processes, each with its own file,
//     do not see each other's marks.
//   - At the key. SQS's message id is minted per send: a producer that
//     retries a send after a timeout makes a second message with a second
//     id, which MessageID cannot recognize. Prefer AttributeKey with an
//     attribute carrying the idempotency key, created once by the producer
//     (Sender sets DefaultKeyAttribute).
//   - At SQS's own deduplication: a FIFO queue drops a send whose
//     deduplication id it saw in the last five minutes, no longer; a
//     standard queue drops nothing and may itself deliver a message twice.
//     The consumer's store is what removes the rest.
//   - At the window: a redelivery older than the store's Retention is
//     applied again.
//   - Order: deduplication does not fix reordering; the fencing token
//     attribute lets a consumer refuse a stale write (oncekv.PutFenced).
//
// # Tests
//
// The tests run against goaws (github.com/Admiral-Piett/goaws v0.4.5, an
// SQS-compatible server from the Go module proxy) started inside the test
// process on 127.0.0.1, with the real SDK client speaking SQS's query
// protocol (the SDK's own awsquery codec: goaws does not speak the JSON
// protocol the SDK uses by default). Where goaws falls short, a small fake
// wrapping the client stands in, and the test says so: goaws never reports
// a failed entry of DeleteMessageBatch, keeps no FIFO deduplication after
// a delete, ignores a receive's VisibilityTimeout (a queue's own is used)
// and always reports an ApproximateReceiveCount of 1.
package sqs
