package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/rabbitmq"
	"github.com/oncekv/oncekv/retry"
)

// outcomes gathers a consumer's outcomes, safe for concurrent use.
type outcomes struct {
	mu   sync.Mutex
	list []rabbitmq.Outcome
}

func (o *outcomes) add(x rabbitmq.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list = append(o.list, x)
}

// of returns the actions taken for key, in order.
func (o *outcomes) of(key string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, x := range o.list {
		if x.Key == key {
			a := x.Verdict.Action.String()
			if x.Result.Duplicate {
				a = "dup"
			}
			out = append(out, a)
		}
	}
	return out
}

func (o *outcomes) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.list)
}

// runConsumer runs c until the test ends, and fails the test if Run
// returned an error.
func runConsumer(t *testing.T, c *rabbitmq.Consumer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

var errFlaky = errors.New("upstream timeout")

// TestConsumerSettlesEachDelivery publishes, to a real broker: 20
// messages, each twice under one message_id (the producer's retry after a
// lost confirm); one whose effect fails permanently; one without a
// message_id; one whose effect fails twice, transiently, then succeeds;
// and one reusing a key with another body. The consumer must apply each
// key once and ack its copy as a duplicate, dead-letter the permanent
// failure, the keyless one and the reused key (and find them in the
// dead-letter queue, message_id kept), and requeue the flaky one until it
// is applied.
func TestConsumerSettlesEachDelivery(t *testing.T) {
	url := brokerURL(t)
	db := openDB(t)
	q, dlx := unique("settle"), unique("settle.dlx")
	dlq := q + rabbitmq.DefaultDeadLetterSuffix
	deleteAfter(t, url, []string{q, dlq}, []string{dlx})

	var (
		mu    sync.Mutex
		flaky int
	)
	var seen outcomes
	c, err := rabbitmq.NewConsumer(db, &rabbitmq.ConsumerOptions{
		URL: url, Queue: q, DeadLetterExchange: dlx, Prefetch: 10,
		Retry:     &retry.Policy{Base: 20 * time.Millisecond, Cap: 50 * time.Millisecond},
		OnOutcome: seen.add,
	}, func(tx *oncekv.Tx, d *amqp.Delivery) error {
		switch d.MessageId {
		case "poison":
			return oncekv.Permanent(errors.New("invalid order"))
		case "flaky":
			mu.Lock()
			defer mu.Unlock()
			if flaky++; flaky <= 2 {
				return errFlaky
			}
		}
		return count(tx, d.MessageId)
	})
	require.NoError(t, err)
	runConsumer(t, c)

	ch := channel(t, url)
	require.NoError(t, ch.Confirm(false))
	// The consumer declares the queue; wait for it before publishing.
	require.Eventually(t, func() bool {
		probe := channel(t, url)
		_, err := probe.QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil
	}, 20*time.Second, 50*time.Millisecond)
	const n = 20
	for i := range n {
		id := fmt.Sprintf("m-%02d", i)
		publish(t, ch, q, id, []byte(id), nil)
		publish(t, ch, q, id, []byte(id), nil)
	}
	publish(t, ch, q, "poison", []byte("p"), nil)
	publish(t, ch, q, "", []byte("no key"), nil)
	publish(t, ch, q, "flaky", []byte("f"), nil)
	publish(t, ch, q, "reused", []byte("first"), nil)
	require.Eventually(t, func() bool { return len(seen.of("reused")) == 1 }, 20*time.Second, 10*time.Millisecond)
	publish(t, ch, q, "reused", []byte("second"), nil)

	want := 2*n + 2 + 3 + 2 // the pairs, poison and keyless, flaky's three, reused's two
	require.Eventually(t, func() bool { return seen.len() >= want }, 30*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // nothing more comes: the requeues are over
	require.Equal(t, want, seen.len())

	got := applied(t, db)
	for i := range n {
		id := fmt.Sprintf("m-%02d", i)
		require.Equal(t, uint64(1), got[id], "key %s", id)
		require.Equal(t, []string{"ack", "dup"}, seen.of(id), "key %s", id)
	}
	require.Equal(t, uint64(1), got["flaky"])
	require.Equal(t, []string{"requeue", "requeue", "ack"}, seen.of("flaky"))
	require.Equal(t, []string{"dead-letter"}, seen.of("poison"))
	require.Equal(t, []string{"dead-letter"}, seen.of(""))
	require.Equal(t, []string{"ack", "dead-letter"}, seen.of("reused"))
	require.NotContains(t, got, "poison")

	// The dead letters are kept, with their message_id.
	var dead []string
	require.Eventually(t, func() bool {
		d, ok, err := ch.Get(dlq, true)
		require.NoError(t, err)
		if ok {
			dead = append(dead, d.MessageId)
		}
		return len(dead) == 3
	}, 10*time.Second, 10*time.Millisecond)
	require.ElementsMatch(t, []string{"poison", "", "reused"}, dead)

	s := c.Stats()
	require.Equal(t, uint64(n+2), s.Applied)
	require.Equal(t, uint64(n), s.Duplicates)
	require.Equal(t, uint64(3), s.DeadLettered)
	require.Equal(t, uint64(2), s.Requeued)
	require.Equal(t, uint64(want), s.Deliveries)
	t.Logf("stats %+v", s)
}

// TestRunReturnsBrokerRefusals: a queue declared before with other
// arguments (PRECONDITION_FAILED), and a missing queue with SkipDeclare
// (NOT_FOUND), end Run with the broker's error instead of a reconnection
// loop.
func TestRunReturnsBrokerRefusals(t *testing.T) {
	url := brokerURL(t)
	db := openDB(t)
	q, dlx := unique("refused"), unique("refused.dlx")
	deleteAfter(t, url, []string{q, q + rabbitmq.DefaultDeadLetterSuffix}, []string{dlx})
	_, err := channel(t, url).QueueDeclare(q, true, false, false, false, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := rabbitmq.NewConsumer(db, &rabbitmq.ConsumerOptions{URL: url, Queue: q, DeadLetterExchange: dlx}, nop)
	require.NoError(t, err)
	err = c.Run(ctx)
	var ae *amqp.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, amqp.PreconditionFailed, ae.Code)
	require.ErrorContains(t, err, q)

	c, err = rabbitmq.NewConsumer(db, &rabbitmq.ConsumerOptions{URL: url, Queue: unique("missing"), SkipDeclare: true}, nop)
	require.NoError(t, err)
	err = c.Run(ctx)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, amqp.NotFound, ae.Code)
	require.NoError(t, ctx.Err(), "returned at once, not after retries")
}
