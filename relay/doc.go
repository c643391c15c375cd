// Package relay delivers a queue (package queue) to the outside world: N
// workers receive messages, hand each to a send function (an HTTP POST, an
// MQTT or NATS publish), ack on success and nack on failure, within a retry
// budget so that an outage of the far side is not multiplied by retries.
// A worker's ack leases its next message in the same commit
// (queue.AckAndPoll): one commit per message sent while messages wait.
// With queue.EnqueueTx inside oncekv's Apply, it is the transactional
// outbox's other half.
//
//   - At least once to the far side: a message leaves the queue only by an
//     ack after send returned nil, or as a dead letter; a crash at any
//     instant leaves it in the store, sent again once its lease ends.
//   - Effectively once with a deduplicating receiver: every send of a
//     message carries the same Key (stable across retries, takeovers and
//     redrives); HTTPSender puts it in Idempotency-Key and the delivery's
//     fencing token in Oncekv-Fence.
//   - One policy: the queue's Options.Retry is the backoff, persisted as
//     the next visible time. The relay adds the retry budget: a retry the
//     budget refuses is deferred (queue.Defer) without counting an
//     attempt, so waiting never dead-letters anything.
//   - Run stops when ctx is done: sends in flight get Options.Grace, and a
//     send cancelled by the stop is released, never dead-lettered.
//
// The relay heartbeats the lease of a message while its send runs
// (Options.Heartbeat), so a slow send is not taken over and sent again
// meanwhile. A budget is per process.
//
// Example delivers an order through a receiver that is down at first. The
// guide, docs/outbox.md in the repository, has the rest.
package relay
