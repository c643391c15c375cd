// Package retry decides when to try again and when to stop: exponential
// backoff with full jitter, Retry-After floors, permanent errors, and a
// retry budget. It uses the standard library only and knows nothing of the
// store, so the queue (nack backoff), the relay (an outbox's workers) and an
// HTTP sender share one set of rules, and a program can use it on its own.
//
// Retrier.Decide is the one decision function: after failed attempt n
// (numbered from 1) it says retry at a time, drawn uniformly below
// min(Cap, Base × 2^(n-1)) and raised to the cause's Retry-After (capped by
// MaxRetryAfter), or stop and why (ReasonPermanent, ReasonExhausted,
// ReasonBudget, ReasonCanceled). It never sleeps; Do is the only function
// that waits. An error is permanent when something in its chain has a
// method Permanent() bool returning true (Permanent, and the store's
// oncekv.Permanent); it carries a Retry-After when something in its chain
// has RetryAfter() time.Duration (After, ParseRetryAfter, HTTPStatus). A
// Budget bounds retries to a share of first attempts; it is per process.
//
// ExampleRetrier_Decide, ExampleDo and ExampleBudget show the main calls.
// The guide, docs/retry.md in the repository, argues for each default.
package retry
