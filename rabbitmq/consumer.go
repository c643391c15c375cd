package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/delivery"
	"github.com/oncekv/oncekv/retry"
)

// Effect is what one delivery does to the store: its writes go through tx,
// and commit together with the delivery's mark, or not at all. It may run
// more than once for one delivery (see oncekv.DB.ApplyBatch), and only the
// run that commits leaves changes, so it must change nothing outside tx.
// An error wrapped with oncekv.Permanent dead-letters the delivery and
// records the key as failed; any other error requeues it.
type Effect func(tx *oncekv.Tx, d *amqp.Delivery) error

// Consumer applies the deliveries of one queue through a store, each
// effectively once. Make one with NewConsumer, then call Run.
type Consumer struct {
	db     *oncekv.DB
	opts   ConsumerOptions
	effect Effect
	retry  *retry.Retrier
	// attempts outlives a session, so a reconnection does not reset the
	// count of a failing key; it is used by Run's goroutine only.
	attempts *attempts
	c        counters
	run      delivery.Running // one Run at a time
}

// NewConsumer returns a consumer of opts.Queue that applies each delivery
// with effect through db. It connects to nothing: Run does.
//
// Errors: ErrInvalidOptions naming every bad field (and the retry policy's
// errors).
func NewConsumer(db *oncekv.DB, opts *ConsumerOptions, effect Effect) (*Consumer, error) {
	var given ConsumerOptions
	if opts != nil {
		given = *opts
	}
	o, err := given.withDefaults()
	if db == nil || effect == nil {
		err = errors.Join(err, fmt.Errorf("%w: db and effect are required", ErrInvalidOptions))
	}
	if err != nil {
		return nil, err
	}
	r, err := retry.New(o.Retry)
	if err != nil {
		return nil, fmt.Errorf("%w: Retry: %w", ErrInvalidOptions, err)
	}
	return &Consumer{db: db, opts: o, effect: effect, retry: r, attempts: newAttempts(maxTracked)}, nil
}

// Run connects, declares the queues (see ConsumerOptions), and consumes
// until ctx ends, then returns nil. Each batch of up to Prefetch
// deliveries is applied with one ApplyBatch; only after its commit is each
// delivery acked, requeued or dead-lettered, by its own result (see
// Judge). A lost connection or channel (a broker restart) is redialled
// after a backoff: what it held unacknowledged, RabbitMQ redelivers, and
// the store answers what was applied as duplicates.
//
// Run returns an error only for what a reconnection cannot fix: the
// broker refused the declarations or the consumer (ACCESS_REFUSED,
// NOT_FOUND, PRECONDITION_FAILED), the credentials, or the store can no
// longer serve (oncekv.Classify's Reopen: the DB closed or poisoned); the
// batch in hand is then left unacknowledged, for RabbitMQ to redeliver.
// Errors: ErrRunning while another Run of c runs.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.run.Begin(ErrRunning); err != nil {
		return err
	}
	defer c.run.End()
	failures := 0
	for ctx.Err() == nil {
		served, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if fatal(err) {
			return err
		}
		if served {
			failures = 0
		}
		failures++
		c.c.reconnects.Add(1)
		wait := c.retry.Backoff(failures)
		c.opts.Logger.Warn("oncekv: rabbitmq: connection lost, reconnecting",
			"queue", c.opts.Queue, "err", err, "in", wait)
		delivery.Sleep(ctx, wait)
	}
	return nil
}

// errStore marks an error of the store that ends Run.
type errStore struct{ err error }

func (e *errStore) Error() string { return e.err.Error() }
func (e *errStore) Unwrap() error { return e.err }

// fatal reports whether err ends Run rather than a reconnection: the
// store's, or a refusal by the broker that the same request would get
// again.
func fatal(err error) bool {
	var se *errStore
	if errors.As(err, &se) {
		return true
	}
	if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) || errors.Is(err, amqp.ErrSASL) {
		return true
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.AccessRefused, amqp.NotFound, amqp.PreconditionFailed, amqp.NotAllowed, amqp.CommandInvalid, amqp.NotImplemented:
			return true
		}
	}
	return false
}

// session is one connection's life: dial, declare, consume, serve until
// the connection or channel is lost (an error) or ctx ends. served is true
// when it got as far as consuming.
func (c *Consumer) session(ctx context.Context) (served bool, err error) {
	conn, err := dial(ctx, c.opts.URL, c.opts.Config)
	if err != nil {
		return false, fmt.Errorf("oncekv: rabbitmq: dial: %w", err)
	}
	// Closing the connection requeues every delivery it holds
	// unacknowledged, the batch in hand and the held ones included.
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("oncekv: rabbitmq: channel: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := c.declare(ch); err != nil {
		return false, err
	}
	if err := ch.Qos(c.opts.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("oncekv: rabbitmq: qos: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, c.opts.Queue, c.opts.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("oncekv: rabbitmq: consume %q: %w", c.opts.Queue, err)
	}
	return true, c.serve(ctx, deliveries, closed)
}

// declare sets up the queues, or checks that Queue exists (SkipDeclare).
func (c *Consumer) declare(ch *amqp.Channel) error {
	o := &c.opts
	if o.SkipDeclare {
		if _, err := ch.QueueDeclarePassive(o.Queue, true, false, false, false, nil); err != nil {
			return fmt.Errorf("oncekv: rabbitmq: queue %q: %w", o.Queue, err)
		}
		return nil
	}
	if err := ch.ExchangeDeclare(o.DeadLetterExchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("oncekv: rabbitmq: dead-letter exchange %q: %w", o.DeadLetterExchange, err)
	}
	if _, err := ch.QueueDeclare(o.DeadLetterQueue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("oncekv: rabbitmq: dead-letter queue %q: %w", o.DeadLetterQueue, err)
	}
	if err := ch.QueueBind(o.DeadLetterQueue, "", o.DeadLetterExchange, false, nil); err != nil {
		return fmt.Errorf("oncekv: rabbitmq: binding %q to %q: %w", o.DeadLetterQueue, o.DeadLetterExchange, err)
	}
	args := amqp.Table{}
	for k, v := range o.QueueArgs {
		args[k] = v
	}
	args["x-dead-letter-exchange"] = o.DeadLetterExchange
	if _, err := ch.QueueDeclare(o.Queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("oncekv: rabbitmq: queue %q: %w", o.Queue, err)
	}
	return nil
}

// serve batches the deliveries and applies each batch, and requeues the
// held deliveries when they are due, until ctx ends (nil) or the channel
// is lost (an error).
func (c *Consumer) serve(ctx context.Context, deliveries <-chan amqp.Delivery, closed <-chan *amqp.Error) error {
	var (
		h     held // void with the channel: RabbitMQ requeues them
		timer = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		timer.Stop()
		var due <-chan time.Time
		if at, ok := h.next(); ok {
			timer.Reset(time.Until(at))
			due = timer.C
		}
		var batch []amqp.Delivery
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			return lost(e)
		case <-due:
			for _, x := range h.due(time.Now()) {
				c.send(x.d, x.key, Verdict{Action: Requeue})
			}
			continue
		case d, ok := <-deliveries:
			if !ok {
				return lost(nil)
			}
			batch = c.fill(ctx, append(batch, d), deliveries)
		}
		if err := c.handle(ctx, batch, &h, c.attempts); err != nil {
			return err
		}
	}
}

// lost is the error of a channel or connection that closed.
func lost(e *amqp.Error) error {
	if e == nil {
		return errors.New("oncekv: rabbitmq: channel closed")
	}
	return fmt.Errorf("oncekv: rabbitmq: channel closed: %w", e)
}

// fill adds deliveries to batch until it holds Prefetch of them, or none
// arrives within BatchWait.
func (c *Consumer) fill(ctx context.Context, batch []amqp.Delivery, deliveries <-chan amqp.Delivery) []amqp.Delivery {
	var wait <-chan time.Time
	if c.opts.BatchWait > 0 {
		t := time.NewTimer(c.opts.BatchWait)
		defer t.Stop()
		wait = t.C
	}
	for len(batch) < c.opts.Prefetch {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch
			}
			batch = append(batch, d)
			continue
		default:
		}
		if wait == nil {
			return batch
		}
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch
			}
			batch = append(batch, d)
		case <-wait:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// handle applies one batch with one ApplyBatch, then settles each
// delivery by its own result. A failure of the batch as a whole that a
// retry can fix holds every delivery for a backoff; one that ends Run
// (the store closed, ctx ended) sends nothing.
func (c *Consumer) handle(ctx context.Context, batch []amqp.Delivery, h *held, attempts *attempts) error {
	c.c.batches.Add(1)
	keys := make([]string, len(batch))
	for i := range batch {
		d := &batch[i]
		c.c.deliveries.Add(1)
		if d.Redelivered {
			c.c.redelivered.Add(1)
		}
		k, err := KeyOf(d, c.opts.KeyHeader)
		if err != nil {
			c.settle(d, "", oncekv.Result{}, err, 1, h, attempts)
			continue
		}
		keys[i] = k
	}
	results, err := delivery.Apply(ctx, c.db, c.opts.Handler, keys,
		func(i int) []byte { return batch[i].Body },
		func(tx *oncekv.Tx, i int) ([]byte, error) { return nil, c.effect(tx, &batch[i]) })
	if err != nil {
		if ctx.Err() != nil {
			return nil // unacknowledged: the broker requeues the batch when Run closes the channel
		}
		if oncekv.Classify(err).Action == oncekv.Reopen {
			return &errStore{fmt.Errorf("oncekv: rabbitmq: apply batch: %w", err)}
		}
	}
	for i := range batch {
		if keys[i] == "" {
			continue // settled above
		}
		// A batch that failed as a whole still answers each request (its
		// own error, or the batch's); no request with an error was applied.
		res, e := oncekv.Result{}, err
		if results != nil {
			res, e = results[i].Result, results[i].Err
		}
		if oncekv.Classify(e).Action == oncekv.Reopen {
			return &errStore{fmt.Errorf("oncekv: rabbitmq: apply: %w", e)}
		}
		c.settle(&batch[i], keys[i], res, e, attempts.next(keys[i], &batch[i]), h, attempts)
	}
	return nil
}

// settle judges one delivery, tells OnOutcome, and acks, dead-letters or
// requeues it (now, or by holding it for the verdict's delay).
func (c *Consumer) settle(d *amqp.Delivery, key string, res oncekv.Result, err error, attempt int, h *held, attempts *attempts) {
	v := Judge(err, attempt, c.db.Now(), c.retry)
	switch {
	case v.Action == Ack && res.Duplicate:
		c.c.duplicates.Add(1)
		delivery.LogDuplicate(context.Background(), c.opts.Logger, c.opts.Handler, key, c.db.Now().Sub(res.FirstSeen),
			slog.String("queue", c.opts.Queue), slog.Uint64("delivery_tag", d.DeliveryTag), slog.Bool("redelivered", d.Redelivered))
	case v.Action == Ack:
		c.c.applied.Add(1)
	case v.Action == DeadLetter:
		c.c.deadLettered.Add(1)
	default:
		c.c.requeued.Add(1)
	}
	if v.Action != Requeue {
		attempts.forget(key)
	}
	if c.opts.OnOutcome != nil {
		c.opts.OnOutcome(Outcome{Delivery: d, Key: key, Verdict: v, Result: res, Err: err})
	}
	if v.Action == Requeue && v.Delay > 0 {
		h.add(*d, key, time.Now().Add(v.Delay))
		return
	}
	c.send(*d, key, v)
}

// send tells RabbitMQ v about d. A lost ack is no error: the delivery
// comes back, and the store answers it as a duplicate.
func (c *Consumer) send(d amqp.Delivery, key string, v Verdict) {
	var err error
	switch v.Action {
	case Ack:
		err = d.Ack(false)
	case DeadLetter:
		err = d.Nack(false, false)
	default:
		err = d.Nack(false, true)
	}
	if err != nil {
		c.opts.Logger.Warn("oncekv: rabbitmq: "+v.Action.String()+" not sent", "queue", c.opts.Queue, "key", key, "err", err)
	}
}
