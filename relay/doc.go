// Package relay delivers a queue (package queue) to the outside world: N
// workers receive messages, hand each to a send function (an HTTP POST, an
// MQTT or NATS publish), ack on success and nack on failure, within a retry
// budget so that an outage of the far side is not multiplied by retries.
// With queue.EnqueueTx inside oncekv's Apply, it is the transactional
// outbox's other half.
//
//	send, err := relay.HTTPSender(client, http.MethodPost, url, nil)
//	...
//	r, err := relay.New(q, send, nil)
//	...
//	err = r.Run(ctx) // until ctx is done
//
// (ExampleHTTPSender is this snippet, compiled and run.)
//
// # One policy
//
// The queue's retry policy (queue.Options.Retry) is the only backoff: a
// failed send is nacked, and the queue persists the next visible time,
// full jitter floored by the error's Retry-After (see retry.HTTPStatus), so
// a restart resumes where the store says. A permanent error
// (retry.Permanent or oncekv.Permanent) or a failure of the policy's
// MaxAttempts-th attempt dead-letters the message, with its key, so a
// queue.Redrive cannot make the far side apply it twice.
//
// The relay adds the retry budget (retry.Budget), which the queue has no
// use for: a message's first delivery (Attempt 1) deposits in it, and
// every later delivery (Attempt above 1: a retry after a nack, or after a
// lease that ran out) is sent only if Budget.TryRetry allows it. A retry
// the budget refuses is not sent: the message is deferred (queue.Defer)
// by a fresh full-jitter delay of the policy for its last failed attempt,
// and that delivery is not counted, so waiting for the budget never
// dead-letters anything. Under a full outage the far side therefore sees
// the first attempts plus at most the budget's share (Ratio of them plus
// MinPerSecond per second), however many messages are waiting.
//
// # Guarantees
//
//   - At least once to the far side: a message leaves the queue only by an
//     ack after send returned nil, or as a dead letter. A crash or SIGKILL
//     at any instant leaves it in the store, and it is sent again once its
//     lease ends.
//   - Effectively once with a deduplicating receiver: every send of a
//     message carries the same Key (stable across retries, takeovers and
//     redrives); HTTPSender puts it in Idempotency-Key, and the fencing
//     token, new at every delivery, in Oncekv-Fence.
//   - Order per ordering key holds through failures: with the queue's
//     default HoldOrderingKey, a message dead-lettered by the far side
//     holds its key's later messages until it is redriven (and then goes
//     first) or deleted, so the far side sees edit-1, edit-2, edit-3.
//   - Run stops when ctx is done: no new message is received, and sends in
//     flight get Options.Grace to finish; then their context is cancelled.
//     A send that failed or was cancelled is nacked (the attempt counts:
//     it may have reached the far side); one cancelled by the stop is
//     released at once, without backoff, and never dead-lettered, even on
//     its last attempt. A message received but not yet sent is deferred
//     without counting.
//
// # Dead letters and redrives
//
// A dead letter says why: HTTPSender's error, kept as the message's
// LastError, ends with the far side's answer (a problem's title and detail,
// or the start of the body), marked "(replayed)" when the far side answered
// from its idempotency records. A redrive sends the same key again, so a
// far side that stored its 4xx under that key (idemhttp stores 4xx) answers
// the same 4xx, replayed, and the message is dead-lettered again: fix the
// cause on the far side, and have it not store a refusal that came before
// any effect (idemhttp.DoNotStore), or let its record expire, before a
// redrive. A message that must change is a new message, with a new key.
//
// # Caveats
//
// A send that outlived its lease would let another worker take the
// message over and send it at the same time. The relay heartbeats the
// lease while a send runs (Options.Heartbeat, a third of the queue's
// Visibility by default) and cancels the send if the lease is lost or
// cannot be extended before it ends; New refuses a Heartbeat the
// Visibility cannot cover, and without heartbeats a SendTimeout that is
// not shorter than the Visibility. A send that ignores its context can
// still outlive its lease: the far side then sees both (the key lets it
// deduplicate; the ack of the older one fails with oncekv.ErrFenced and is
// counted in Stats.Fenced).
// A budget is per process; share one Budget among the relays that call the
// same far side. Each retry the budget refuses costs one local commit (the
// Defer), about one per waiting message per backoff draw: the far side is
// spared, the disk is not. net/http's Transport resends a request that
// carries an Idempotency-Key once by itself when a reused connection breaks
// before any answer; that resend is the Transport's, not counted by the
// budget.
package relay
