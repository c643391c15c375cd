// Package nats is oncekv behind a NATS JetStream pull consumer: each fetch
// of a batch is applied with one ApplyBatch (one commit, one fsync), and
// each message is then acknowledged, redelivered later or terminated,
// according to its own result.
//
// JetStream deduplicates only what carries the same Nats-Msg-Id within
// the stream's duplicate window; a producer that publishes one reading
// twice under two ids, or a consumer that dies before its ack, makes the
// same reading arrive again. The reading's key in the payload, checked by
// the store's marks, is what makes its effect happen once.
package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/examples/internal/required"
	"github.com/oncekv/oncekv/retry"
)

// Action is what to tell JetStream about one message.
type Action int

// The actions, as JetStream names them.
const (
	// Ack: applied, or a duplicate of an applied message.
	Ack Action = iota
	// Nak: redeliver after the Verdict's Delay.
	Nak
	// Term: never redeliver; the message can not succeed (a permanent
	// failure, a bad payload, or out of attempts).
	Term
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Nak:
		return "nak"
	case Term:
		return "term"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Verdict is what Judge says about one message.
type Verdict struct {
	Action Action
	Delay  time.Duration // for Nak: how long before the redelivery
}

// Judge maps the store's answer to one delivery, err (a BatchResult's
// Err, or Decode's error), to a Verdict. attempt is the delivery's number
// (JetStream's NumDelivered, 1 for the first), now the store's time
// (DB.Now), and r the backoff of transient failures.
//
//   - nil (applied, or a duplicate): Ack.
//   - a key that a live claim holds (*oncekv.InProgressError): Nak until
//     the claim's lease ends, when the key is done or can be taken over.
//   - a permanent failure (*oncekv.FailedError, or anything
//     oncekv.Classify says to give up on): Term, since a redelivery gets
//     the same answer forever.
//   - anything else is transient: Nak after r's full-jitter backoff for
//     attempt, or Term when r says attempts are exhausted.
func Judge(err error, attempt int, now time.Time, r *retry.Retrier) Verdict {
	if err == nil {
		return Verdict{Action: Ack}
	}
	var ipe *oncekv.InProgressError
	if errors.As(err, &ipe) {
		return Verdict{Action: Nak, Delay: ipe.RetryAfter(now)}
	}
	var fe *oncekv.FailedError
	if errors.As(err, &fe) || oncekv.Classify(err).Action == oncekv.GiveUp {
		return Verdict{Action: Term}
	}
	// No ctx of the caller's here: a batch cut short by ctx never gets
	// to Judge (Handle sends nothing then).
	d := r.Decide(context.Background(), attempt, err, now)
	if d.DeadLetter() {
		return Verdict{Action: Term}
	}
	return Verdict{Action: Nak, Delay: d.Delay}
}

// ErrInvalidOptions is returned by Consume, before it calls the server,
// for options it cannot run with, naming each missing field.
var ErrInvalidOptions = errors.New("oncekv: nats: invalid consumer options")

// ConsumerOptions configures Consume.
type ConsumerOptions struct {
	// Stream and Durable name the stream and the durable pull consumer
	// (AckExplicit), which Consume creates if missing.
	Stream, Durable string
	// AckWait is how long JetStream waits for an ack before it redelivers
	// a message: what a killed consumer's messages wait. Default 30s.
	AckWait time.Duration
	// Handler is the oncekv handler of the applies. Default
	// "nats-readings".
	Handler string
	// Batch is how many messages a fetch asks for. Default 100.
	Batch int
	// MaxWait bounds how long a fetch waits for messages, and so how long
	// Consume takes to notice that ctx ended. Default 1s.
	MaxWait time.Duration
	// Retry paces the redeliveries of transient failures and says when to
	// stop (see Judge), and paces fetches that failed. nil: retry's
	// defaults.
	Retry *retry.Policy
	// OnVerdict, if set, is called for each message once its verdict is
	// decided, just before it is sent to JetStream: a crash between the two
	// leaves the message to come back, so every acked message was seen by
	// OnVerdict first.
	OnVerdict OnVerdict
}

// OnVerdict is told of each message's verdict: the reading's key ("" for
// a payload that is not a reading), the verdict, and the store's answer.
type OnVerdict func(key string, v Verdict, res oncekv.Result, err error)

// Consume creates (or updates) the durable consumer, then fetches batches
// and handles each with one ApplyBatch (Handle) until ctx ends: the next
// batch is fetched while one is handled, and the batches are handled one
// at a time, in fetch order. It returns Handle's error, unless ctx ended,
// and a fetch that could not be made.
func Consume(ctx context.Context, db *oncekv.DB, js jetstream.JetStream, o ConsumerOptions) error {
	if err := required.Check(ErrInvalidOptions,
		required.Field{Name: "Stream", Value: o.Stream},
		required.Field{Name: "Durable", Value: o.Durable}); err != nil {
		return err
	}
	if o.Handler == "" {
		o.Handler = "nats-readings"
	}
	if o.Batch <= 0 {
		o.Batch = 100
	}
	if o.MaxWait <= 0 {
		o.MaxWait = time.Second
	}
	r, err := retry.New(o.Retry)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, o.Stream, jetstream.ConsumerConfig{
		Durable: o.Durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: o.AckWait,
	})
	if err != nil {
		return fmt.Errorf("oncekv: nats: consumer %q of stream %q: %w", o.Durable, o.Stream, err)
	}
	// One goroutine handles the batches, one at a time, while this one
	// fetches the next: the fetch's round trips overlap the batch's commit.
	// batches is unbuffered, so at most two fetches are out of the
	// server's hands: one being handled, one waiting for its turn.
	batches := make(chan []jetstream.Msg)
	failed := make(chan struct{}) // closed when Handle failed
	handled := make(chan error, 1)
	go func() {
		for msgs := range batches {
			if err := Handle(ctx, db, r, o.Handler, msgs, o.OnVerdict); err != nil {
				close(failed)
				for range batches { // unanswered: they come back after AckWait
				}
				handled <- err
				return
			}
		}
		handled <- nil
	}()
	err = fetch(ctx, cons, o, r, batches, failed)
	close(batches)
	if herr := <-handled; herr != nil && ctx.Err() == nil {
		return herr // the batch comes back after AckWait
	}
	return err
}

// fetch fetches batches and hands each to batches until ctx ends, failed
// is closed, or a fetch cannot be made (its error).
func fetch(ctx context.Context, cons jetstream.Consumer, o ConsumerOptions, r *retry.Retrier, batches chan<- []jetstream.Msg, failed <-chan struct{}) error {
	failures := 0 // fetches in a row that ended in an error
	for ctx.Err() == nil {
		batch, err := cons.Fetch(o.Batch, jetstream.FetchMaxWait(o.MaxWait))
		if err != nil {
			return fmt.Errorf("oncekv: nats: fetch: %w", err)
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		// A fetch that waited MaxWait for nothing ends without an error;
		// one that failed (the server restarting, the consumer deleted) is
		// tried again after a backoff, so a lasting failure is not a spin.
		if err := batch.Error(); err != nil && ctx.Err() == nil {
			failures++
			slog.Warn("oncekv: nats: fetch failed", "err", err, "failures", failures)
			select {
			case <-ctx.Done():
			case <-failed:
			case <-time.After(r.Backoff(failures)):
			}
		} else {
			failures = 0
		}
		if len(msgs) > 0 {
			select {
			case batches <- msgs:
			case <-failed:
				return nil // Consume returns Handle's error
			}
		}
	}
	return nil
}

// Handle applies one fetch with one ApplyBatch, then acks, naks or
// terminates each message by its own result (see Judge). A failure of the
// batch as a whole (ctx ended before the commit, the store closed) sends
// nothing: JetStream redelivers the batch after AckWait, and Handle
// returns that error. onVerdict may be nil.
func Handle(ctx context.Context, db *oncekv.DB, r *retry.Retrier, handler string, msgs []jetstream.Msg, onVerdict OnVerdict) error {
	reqs := make([]oncekv.Request, 0, len(msgs))
	readings := make([]reading.Reading, 0, len(msgs))
	applied := make([]jetstream.Msg, 0, len(msgs))
	for _, m := range msgs {
		rd, err := reading.Decode(m.Data())
		if err != nil {
			reply(m, "", Judge(err, 1, db.Now(), r), oncekv.BatchResult{Err: err}, onVerdict)
			continue
		}
		reqs = append(reqs, reading.Request(handler, m.Data(), rd))
		readings = append(readings, rd)
		applied = append(applied, m)
	}
	results, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
		return nil, reading.Store(tx, reqs[i].Payload, readings[i])
	})
	if err != nil {
		return fmt.Errorf("oncekv: nats: apply batch: %w", err)
	}
	now := db.Now()
	for i, m := range applied {
		attempt := 1
		if md, err := m.Metadata(); err == nil {
			attempt = int(min(md.NumDelivered, 1<<30))
		}
		reply(m, readings[i].Key, Judge(results[i].Err, attempt, now, r), results[i], onVerdict)
	}
	return nil
}

// reply sends v to JetStream for m. A lost reply is not an error: an
// unacked message comes back after AckWait, and the store answers it as a
// duplicate.
func reply(m jetstream.Msg, key string, v Verdict, res oncekv.BatchResult, onVerdict OnVerdict) {
	if onVerdict != nil {
		onVerdict(key, v, res.Result, res.Err)
	}
	var err error
	switch v.Action {
	case Ack:
		err = m.Ack()
	case Nak:
		err = m.NakWithDelay(v.Delay)
	case Term:
		err = m.Term()
	}
	if err != nil {
		slog.Warn("oncekv: nats: reply", "key", key, "action", v.Action, "err", err)
	}
}
