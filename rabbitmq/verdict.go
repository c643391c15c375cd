package rabbitmq

import (
	"context"
	"fmt"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/delivery"
	"github.com/oncekv/oncekv/retry"
)

// Action is what the consumer tells RabbitMQ about one delivery.
type Action int

// The actions.
const (
	// Ack (basic.ack): applied, or a duplicate of an applied message.
	Ack Action = iota
	// Requeue (basic.nack with requeue), after the Verdict's Delay: the
	// delivery failed in a way a later attempt can fix. The consumer holds
	// the delivery unacknowledged for the delay, so a failing upstream is
	// not hammered by a redelivery loop.
	Requeue
	// DeadLetter (basic.nack without requeue): no attempt can succeed (a
	// permanent failure, key reuse, no key, attempts exhausted). RabbitMQ
	// moves the message to the queue's dead-letter exchange, with an
	// x-death header, its message_id and headers kept.
	DeadLetter
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Requeue:
		return "requeue"
	case DeadLetter:
		return "dead-letter"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// MaxHold bounds the Delay of a Requeue: RabbitMQ closes the channel of a
// consumer that holds a delivery unacknowledged longer than its
// consumer_timeout (30 minutes by default), which would requeue every
// delivery of the channel at once.
const MaxHold = 10 * time.Minute

// Verdict is what Judge says about one delivery.
type Verdict struct {
	Action Action
	// Delay is, for Requeue, how long to hold the delivery before the
	// nack; at most MaxHold.
	Delay time.Duration
}

// Judge maps the store's answer to one delivery, err (a BatchResult's
// Err, or KeyOf's), to a Verdict, by oncekv.Classify. attempt is the
// delivery's number (1 for the first), now the store's time (DB.Now), r
// the backoff of transient failures.
//
//   - Ack (nil: applied, or a duplicate): Ack.
//   - GiveUp (a permanent failure, FAILED replayed from the mark, key
//     reuse, bad input): DeadLetter, since a redelivery gets the same
//     answer forever.
//   - RetryLater with a NotBefore (a live claim holds the key): Requeue
//     once the holder's lease ends, without counting an attempt.
//   - RetryLater, RetryNow (a transient failure): r.Decide's full-jitter
//     backoff for attempt (zero for RetryNow), or DeadLetter when r says
//     the attempts are exhausted.
//   - Reopen (the DB closed or failing): Requeue at once; Run stops
//     before it gets there, and the broker requeues the delivery itself.
func Judge(err error, attempt int, now time.Time, r *retry.Retrier) Verdict {
	adv := oncekv.Classify(err)
	switch adv.Action {
	case oncekv.Ack:
		return Verdict{Action: Ack}
	case oncekv.Reopen:
		return Verdict{Action: Requeue}
	}
	// No ctx of the caller's: a batch cut short by ctx never gets here.
	delay, again := delivery.Again(context.Background(), err, now, r, func() int { return attempt }, 0)
	switch {
	case !again:
		return Verdict{Action: DeadLetter}
	case adv.Action == oncekv.RetryNow:
		return Verdict{Action: Requeue}
	}
	return Verdict{Action: Requeue, Delay: hold(delay)}
}

// hold clamps a delay into [0, MaxHold].
func hold(d time.Duration) time.Duration { return min(max(d, 0), MaxHold) }
