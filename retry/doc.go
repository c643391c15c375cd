// Package retry decides when to try again and when to stop: exponential
// backoff with full jitter, Retry-After floors, permanent errors, and a
// retry budget. It uses the standard library only and knows nothing of the
// store, so the queue (nack backoff, a persisted next visible time), the
// relay (a pool of workers delivering an outbox) and an HTTP sender share
// one set of rules, and a program can use it on its own.
//
// # Decisions
//
// Retrier.Decide is the one decision function: given the attempt that just
// failed (numbered from 1, the way a queue numbers deliveries), its error,
// the time and the policy, it says retry after a delay, or give up and why:
// ReasonPermanent and ReasonExhausted (dead-letter the message),
// ReasonBudget (keep it, the far side is struggling), ReasonCanceled (the
// caller's own context ended; release it as it was). It never sleeps; the
// delay is drawn from Policy.Rand, which tests seed. Do is the only
// function that waits, and it waits through Policy.Sleep.
//
// The delay after failed attempt n is full jitter, uniform in
// [0, min(Cap, Base × 2^(n-1))) (AWS's "Exponential Backoff and Jitter";
// the first retry waits less than Base), raised to the cause's Retry-After
// (see After) when that is longer, the Retry-After capped by MaxRetryAfter.
//
// # Errors
//
// An error is permanent when something in its chain has a method
// Permanent() bool returning true; Permanent wraps one. The store's
// oncekv.Permanent follows the same contract, so a store error marked
// permanent is permanent here too. An error carries a Retry-After when
// something in its chain has a method RetryAfter() time.Duration; After
// wraps one, ParseRetryAfter reads the HTTP header, and HTTPStatus turns a
// response's status into nil, a transient or a permanent error. Any other
// error is transient.
//
// # Defaults, and why
//
//   - Base 1s: the first retry comes within a second, soon enough to ride
//     over a dropped connection or a restarting server, and a fleet that
//     failed together spreads over a whole second instead of returning in
//     the same instant. 100ms suits in-process calls; the queue and relay
//     cross networks and disks.
//   - Cap 5 minutes: however long an outage lasts, a message is tried again
//     within 5 minutes (2.5 on average) once the far side is back. With the
//     defaults it would first bind after attempt 10 (a 512s ceiling), so it
//     matters once MaxAttempts is raised for an outbox that must ride out
//     long outages.
//   - MaxAttempts 10: nine retries, whose ceilings add up to 511s; on
//     average a poison message is dead-lettered about four minutes after
//     its first failure instead of blocking its queue forever.
//   - MaxRetryAfter 1 hour: a server's Retry-After is honoured up to an
//     hour (maintenance windows); a larger one is likely a bug, and beyond
//     an hour a human should look rather than a timer.
//   - Budget ratio 10% over 10 seconds: the retry budget of Google's SRE
//     book and Envoy, over Finagle's window. Without a budget, three layers
//     of three attempts multiply the load on the bottom one by 27.
//   - Budget floor 1 retry per second: enough for a client with little
//     traffic to retry at all. It is small because edge agents run as a
//     fleet, and the floor, unlike the ratio, is multiplied by the fleet
//     however little it sends: ten thousand devices at Finagle's 10/s
//     would send 100,000 retries a second at a server that is down.
//
// # Caveats
//
// A budget is per process: it bounds what this process adds to an outage,
// not what a fleet does. Decide spends a retry from the budget when it
// decides; a queue whose retries come back as redeliveries must ask
// Budget.TryRetry before sending one that the budget refused earlier.
package retry
