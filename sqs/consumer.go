package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/delivery"
	"github.com/oncekv/oncekv/retry"
)

// Effect applies one message inside the store's write transaction: its
// writes commit together with the message's dedup mark, or not at all. It
// returns the response to store with the mark (nil is fine). It may run
// more than once before one run commits (when another message of the batch
// fails), so it must change nothing outside tx.
type Effect func(tx *oncekv.Tx, m *types.Message) ([]byte, error)

// Consumer applies an SQS queue's messages to a store: each receive with
// one ApplyBatch, then its messages deleted. Make one with NewConsumer and
// call Run; Stats may be called at any time.
type Consumer struct {
	db     *oncekv.DB
	api    API
	effect Effect
	opts   Options
	retry  *retry.Retrier
	stats  counters
	run    delivery.Running // one Run at a time
}

// NewConsumer returns a Consumer applying the messages of opts.QueueURL,
// received through api (an *sqs.Client), to db with effect. It starts
// nothing: call Run.
//
// Errors: ErrNilArgument; ErrInvalidOptions listing every bad field.
func NewConsumer(db *oncekv.DB, api API, effect Effect, opts Options) (*Consumer, error) {
	if db == nil || api == nil || effect == nil {
		return nil, fmt.Errorf("%w: db, api and effect are required", ErrNilArgument)
	}
	o, r, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Consumer{db: db, api: api, effect: effect, opts: o, retry: r}, nil
}

// Run receives, applies and deletes until ctx is done, then returns nil.
// A batch whose store commit began when ctx ended is finished and its
// messages deleted; one that did not begin is left to come back when its
// visibility ends. A receive that fails is tried again after the retry
// policy's backoff. Run returns early with an error only when the store
// cannot serve any batch (closed, read-only, poisoned: oncekv.Classify's
// Reopen). Every goroutine it starts has stopped when it returns. Errors:
// ErrRunning.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.run.Begin(ErrRunning); err != nil {
		return err
	}
	defer c.run.End()
	failures := 0 // receives or batches in a row that failed
	for ctx.Err() == nil {
		out, err := c.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(c.opts.QueueURL),
			MaxNumberOfMessages:         int32(c.opts.MaxMessages),
			WaitTimeSeconds:             seconds(c.opts.WaitTime),
			VisibilityTimeout:           seconds(c.opts.Visibility),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if ctx.Err() != nil {
			return nil
		}
		if err == nil && len(out.Messages) > 0 {
			err = c.handle(ctx, out.Messages)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil && oncekv.Classify(err).Action == oncekv.Reopen {
				return fmt.Errorf("oncekv: sqs: store: %w", err)
			}
		}
		if err == nil {
			failures = 0
			continue
		}
		failures++
		c.opts.Logger.Warn("oncekv: sqs: receive or batch failed; its messages come back after their visibility", "handler", c.opts.Handler, "failures", failures, "err", err)
		if !delivery.Sleep(ctx, c.retry.Backoff(failures)) {
			return nil
		}
	}
	return nil
}

// handle applies one receive with one ApplyBatch while a heartbeat keeps
// its messages invisible, then deletes the settled ones and sets the
// visibility of those to retry. Its error is ApplyBatch's, when the batch
// as a whole failed: nothing is deleted then.
func (c *Consumer) handle(ctx context.Context, msgs []types.Message) error {
	c.stats.receives.Add(1)
	c.stats.messages.Add(uint64(len(msgs)))
	hb := c.startHeartbeat(ctx, msgs)
	defer hb.end()

	outs := make([]Outcome, len(msgs))
	keys := make([]string, len(msgs))
	for i := range msgs {
		o := &outs[i]
		*o = Outcome{Message: &msgs[i], Key: c.opts.Key(&msgs[i])}
		if o.Key == "" {
			o.Err = messageError(o, ErrNoKey)
		}
		keys[i] = o.Key
	}
	results, err := delivery.Apply(ctx, c.db, c.opts.Handler, keys,
		func(i int) []byte { return []byte(aws.ToString(msgs[i].Body)) },
		func(tx *oncekv.Tx, i int) ([]byte, error) { return c.effect(tx, outs[i].Message) })
	if err != nil {
		return err
	}
	for i, res := range results {
		o := &outs[i]
		o.Result = res.Result
		if res.Err != nil {
			o.Err = messageError(o, res.Err)
		}
	}
	// The store has spoken: from here on a crash costs duplicates only.
	hb.end()
	// Deleting them now spares the next receiver the duplicates, even when
	// ctx has ended; past Visibility they are visible again anyway.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.Visibility)
	defer cancel()
	c.judge(ctx, outs)
	if c.opts.OnBatch != nil {
		c.opts.OnBatch(outs)
	}
	var done []*types.Message
	for i := range outs {
		switch o := &outs[i]; o.Verdict {
		case Applied, Duplicate:
			done = append(done, o.Message)
		case Retry:
			c.setVisibility(ctx, o.Message, o.delay, "retry")
		}
	}
	c.delete(ctx, done)
	return nil
}

func messageError(o *Outcome, err error) error {
	return &MessageError{MessageID: aws.ToString(o.Message.MessageId), Key: o.Key, Err: err}
}

// judge gives each message its verdict.
func (c *Consumer) judge(ctx context.Context, outs []Outcome) {
	now := c.db.Now()
	for i := range outs {
		o := &outs[i]
		switch {
		case o.Err == nil && o.Result.Duplicate:
			o.Verdict = Duplicate
			c.stats.duplicates.Add(1)
			delivery.LogDuplicate(ctx, c.opts.Logger, c.opts.Handler, o.Key, now.Sub(o.Result.FirstSeen),
				slog.String("message_id", aws.ToString(o.Message.MessageId)), slog.Int("receive_count", receiveCount(o.Message)))
		case o.Err == nil:
			o.Verdict = Applied
			c.stats.applied.Add(1)
		default:
			if d, again := c.again(ctx, o, now); again {
				o.Verdict, o.delay = Retry, d
				c.stats.retries.Add(1)
				continue
			}
			o.Verdict = GaveUp
			c.stats.gaveUp.Add(1)
			c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "oncekv: sqs: message given up on; left to the queue's redrive policy (dead-letter queue)",
				slog.String("handler", c.opts.Handler), slog.String("key", o.Key),
				slog.String("message_id", aws.ToString(o.Message.MessageId)), slog.Int("receive_count", receiveCount(o.Message)), slog.Any("err", o.Err))
		}
	}
}

// again decides about a message that failed: retried after the returned
// delay (true), or given up on (false).
func (c *Consumer) again(ctx context.Context, o *Outcome, now time.Time) (time.Duration, bool) {
	if errors.Is(o.Err, ErrNoKey) {
		return 0, false
	}
	return delivery.Again(ctx, o.Err, now, c.retry, func() int { return receiveCount(o.Message) }, 0)
}

// receiveCount returns the message's ApproximateReceiveCount, 1 when SQS
// did not say.
func receiveCount(m *types.Message) int {
	n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if err != nil || n < 1 {
		return 1
	}
	return n
}
