package rabbitmq

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/retry"
)

// Defaults of ConsumerOptions.
const (
	DefaultPrefetch  = 100
	DefaultBatchWait = 20 * time.Millisecond
	// DefaultDeadLetterSuffix names the dead-letter queue: the queue's
	// name plus this suffix.
	DefaultDeadLetterSuffix = ".dead-letter"
)

// ConsumerOptions configures a Consumer. A zero field takes its default.
type ConsumerOptions struct {
	// URL is the broker's AMQP URI (amqp://user:pass@host:port/vhost).
	// Required.
	URL string
	// Config is the connection's configuration (TLS, heartbeat,
	// properties), as for amqp091-go's DialConfig. Its Recovery must be
	// nil: the consumer reconnects by itself, on a fresh channel, and
	// lets RabbitMQ requeue what the lost channel held.
	Config amqp.Config
	// Queue is the queue to consume. Required.
	Queue string
	// DeadLetterExchange is the exchange RabbitMQ moves dead letters to.
	// Run declares it (fanout, durable), a durable DeadLetterQueue bound
	// to it, and Queue (durable, with QueueArgs and x-dead-letter-exchange
	// set to it). Required, unless SkipDeclare.
	DeadLetterExchange string
	// DeadLetterQueue is the queue that keeps the dead letters. Default:
	// Queue + DefaultDeadLetterSuffix.
	DeadLetterQueue string
	// QueueArgs are more arguments of Queue's declaration (x-queue-type,
	// x-message-ttl, ...): they must match those of a queue that exists
	// already, or RabbitMQ refuses the declaration (PRECONDITION_FAILED)
	// and Run returns that error.
	QueueArgs amqp.Table
	// SkipDeclare makes Run declare nothing: it only checks that Queue
	// exists (a passive declaration). The queue's dead-lettering is then
	// yours to set up (a policy); without one, RabbitMQ drops what the
	// consumer dead-letters.
	SkipDeclare bool
	// Handler is the oncekv handler of the applies: the dedup scope.
	// Default: Queue.
	Handler string
	// KeyHeader names the header that carries the idempotency key.
	// Default: none, the key is the message_id (see KeyOf).
	KeyHeader string
	// Prefetch is the channel's prefetch count (basic.qos) and the largest
	// batch: one ApplyBatch, one commit, applies up to Prefetch deliveries.
	// Default DefaultPrefetch.
	Prefetch int
	// BatchWait is how long a batch that has its first delivery waits for
	// more, up to Prefetch. Default DefaultBatchWait; negative: no wait,
	// a batch is what has arrived.
	BatchWait time.Duration
	// Retry paces the requeues of transient failures and says when to
	// give up on them (see Judge), and paces the reconnections. nil:
	// retry's defaults.
	Retry *retry.Policy
	// ConsumerTag names the consumer to the broker. Default: one the
	// broker makes up.
	ConsumerTag string
	// Logger receives "duplicate suppressed" at info level (with the
	// queue, the delivery tag and the Redelivered flag) and the
	// reconnections at warn. Default: discard.
	Logger *slog.Logger
	// OnOutcome, if set, is called on Run's goroutine with each
	// delivery's outcome, after the store answered and just before the
	// ack or nack is sent: a crash between the two leaves the delivery
	// to come back, so every acknowledged delivery was seen by OnOutcome
	// first.
	OnOutcome func(Outcome)
}

// Outcome is what the consumer did with one delivery.
type Outcome struct {
	// Delivery is the delivery; do not ack or nack it.
	Delivery *amqp.Delivery
	// Key is its idempotency key, empty when it had none.
	Key string
	// Verdict is what is sent to RabbitMQ.
	Verdict Verdict
	// Result is the store's answer; Result.Duplicate is set for a
	// delivery whose effect had been applied before.
	Result oncekv.Result
	// Err is the store's (or KeyOf's) error, nil for Ack.
	Err error
}

// withDefaults validates o and fills in its defaults, reporting every bad
// field at once.
func (o ConsumerOptions) withDefaults() (ConsumerOptions, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if o.URL == "" {
		bad("URL is required")
	} else if _, err := amqp.ParseURI(o.URL); err != nil {
		bad("URL: %w", err)
	}
	if o.Queue == "" {
		bad("Queue is required")
	}
	if o.DeadLetterExchange == "" && !o.SkipDeclare {
		bad("DeadLetterExchange is required (or SkipDeclare, with dead-lettering set up by a policy)")
	}
	if o.Config.Recovery != nil {
		bad("Config.Recovery must be nil: the consumer reconnects by itself")
	}
	if o.Prefetch < 0 {
		bad("Prefetch = %d: must not be negative", o.Prefetch)
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	if o.DeadLetterQueue == "" {
		o.DeadLetterQueue = o.Queue + DefaultDeadLetterSuffix
	}
	if o.Handler == "" {
		o.Handler = o.Queue
	}
	if o.Prefetch == 0 {
		o.Prefetch = DefaultPrefetch
	}
	if o.BatchWait == 0 {
		o.BatchWait = DefaultBatchWait
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}
