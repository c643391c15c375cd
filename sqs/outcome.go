package sqs

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/delivery"
)

// Verdict says what became of one received message; its String method
// returns the verdict's name ("applied", "duplicate", "gave up", "retry").
type Verdict = delivery.Verdict

// The verdicts.
const (
	// Applied: the effect ran and committed with the message's mark; the
	// message is deleted.
	Applied = delivery.Applied
	// Duplicate: the key was applied before; the effect did not run, and
	// the message is deleted.
	Duplicate = delivery.Duplicate
	// GaveUp: the message can never succeed (no key, key too large, key
	// reused with another payload, an effect's error marked
	// oncekv.Permanent, or the retry policy's attempts spent). It is not
	// deleted: its visibility runs out, and the queue's redrive policy
	// moves it to the dead-letter queue after maxReceiveCount receives.
	// Each of those receives is answered from the store (a permanent
	// failure is recorded), without running the effect again.
	GaveUp = delivery.GaveUp
	// Retry: the message failed in a way a retry can fix; its visibility
	// is set to the retry policy's backoff, so it comes back after it.
	Retry = delivery.Retry
)

// Outcome is what became of one received message.
type Outcome struct {
	Message *types.Message
	Key     string // what Options.Key returned
	Verdict Verdict
	// Result is the store's answer for Applied and Duplicate.
	Result oncekv.Result
	// Err is the message's *MessageError for GaveUp and Retry; nil
	// otherwise.
	Err error

	delay time.Duration // for Retry: the visibility to set
}
