package sqs

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oncekv/oncekv/retry"
)

// Options configures a Consumer. Handler, QueueURL and Key are required;
// a zero field of the others takes its default.
type Options struct {
	// Handler names the consumer in the store: messages are deduplicated
	// per (Handler, key). Required.
	Handler string
	// QueueURL is the queue to consume. Required.
	QueueURL string
	// Key returns a message's idempotency key: AttributeKey with the
	// attribute the producer sets (DefaultKeyAttribute for Sender), or
	// MessageID when producers set none (read its caveat). Required.
	Key KeyFunc
	// MaxMessages is how many messages one receive asks for, and so the
	// size of one ApplyBatch: 1 to 10 (SQS's limit). Default 10.
	MaxMessages int
	// WaitTime is the long poll of one receive, in whole seconds, 0 to
	// 20s; it bounds how long Run takes to see its context end. Default
	// 20s.
	WaitTime time.Duration
	// Visibility is the visibility timeout asked for at each receive and
	// set again at each heartbeat: while a batch is being applied its
	// messages stay invisible to other consumers. Whole seconds, 1s to
	// 12h. Default 30s.
	Visibility time.Duration
	// Heartbeat is how often a batch still being applied has its messages'
	// visibility extended to Visibility again. Below Visibility. Default
	// Visibility/3.
	Heartbeat time.Duration
	// Retry paces the messages that failed in a way a retry can fix (the
	// effect's own error): their visibility is set to the policy's backoff
	// for their receive count, so they come back after it; once the
	// policy's MaxAttempts receives have failed, they are given up on and
	// left to the queue's redrive policy, like a permanent failure. It also
	// paces receives that fail. nil: retry's defaults.
	Retry *retry.Policy
	// OnBatch, if set, is called with every message's outcome once the
	// batch committed in the store and before its messages are deleted,
	// on Run's goroutine: a crash between the two leaves the messages to
	// come back, so every deleted message was seen by OnBatch first. It
	// must not keep the slice.
	OnBatch func(outcomes []Outcome)
	// Logger receives "duplicate suppressed" at info level (handler, key,
	// age_ms, message_id, receive_count), and failed deletes, heartbeats
	// and given-up messages at warn. Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns o with its defaults filled in, or ErrInvalidOptions
// listing every bad field.
func (o Options) withDefaults() (Options, *retry.Retrier, error) {
	if o.MaxMessages == 0 {
		o.MaxMessages = 10
	}
	if o.WaitTime == 0 {
		o.WaitTime = 20 * time.Second
	}
	if o.Visibility == 0 {
		o.Visibility = 30 * time.Second
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = o.Visibility / 3
	}
	var errs []error
	if o.Handler == "" {
		errs = append(errs, errors.New("option Handler is required"))
	}
	if o.QueueURL == "" {
		errs = append(errs, errors.New("option QueueURL is required"))
	}
	if o.Key == nil {
		errs = append(errs, errors.New("option Key is required (AttributeKey or MessageID)"))
	}
	if o.MaxMessages < 1 || o.MaxMessages > 10 {
		errs = append(errs, fmt.Errorf("option MaxMessages %d is not within 1 to 10", o.MaxMessages))
	}
	if o.WaitTime < 0 || o.WaitTime > 20*time.Second || o.WaitTime%time.Second != 0 {
		errs = append(errs, fmt.Errorf("option WaitTime %v is not whole seconds within 0 to 20s", o.WaitTime))
	}
	if o.Visibility < time.Second || o.Visibility > 12*time.Hour || o.Visibility%time.Second != 0 {
		errs = append(errs, fmt.Errorf("option Visibility %v is not whole seconds within 1s to 12h", o.Visibility))
	}
	if o.Heartbeat <= 0 || o.Heartbeat >= o.Visibility {
		errs = append(errs, fmt.Errorf("option Heartbeat %v is not within 0 and Visibility %v", o.Heartbeat, o.Visibility))
	}
	r, err := retry.New(o.Retry)
	if err != nil {
		errs = append(errs, fmt.Errorf("option Retry: %w", err))
	}
	if len(errs) > 0 {
		return o, nil, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, r, nil
}
