package rabbitmq_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/rabbitmq"
	"github.com/oncekv/oncekv/retry"
)

func nop(*oncekv.Tx, *amqp.Delivery) error { return nil }

// TestNewConsumerRejectsBadOptions needs no broker: every bad field is
// named in one ErrInvalidOptions, before anything connects.
func TestNewConsumerRejectsBadOptions(t *testing.T) {
	db := openDB(t)
	_, err := rabbitmq.NewConsumer(db, nil, nop)
	require.ErrorIs(t, err, rabbitmq.ErrInvalidOptions)
	for _, want := range []string{"URL is required", "Queue is required", "DeadLetterExchange is required"} {
		require.ErrorContains(t, err, want)
	}
	_, err = rabbitmq.NewConsumer(db, &rabbitmq.ConsumerOptions{
		URL: "http://not-amqp", Queue: "q", SkipDeclare: true, Prefetch: -1,
		Config: amqp.Config{Recovery: &amqp.Recovery{}},
	}, nop)
	require.ErrorIs(t, err, rabbitmq.ErrInvalidOptions)
	for _, want := range []string{"URL: ", "Prefetch = -1", "Config.Recovery must be nil"} {
		require.ErrorContains(t, err, want)
	}
	require.NotContains(t, err.Error(), "DeadLetterExchange")
	_, err = rabbitmq.NewConsumer(nil, &rabbitmq.ConsumerOptions{URL: "amqp://h", Queue: "q", SkipDeclare: true}, nil)
	require.ErrorIs(t, err, rabbitmq.ErrInvalidOptions)
	require.ErrorContains(t, err, "db and effect are required")
	_, err = rabbitmq.NewConsumer(db, &rabbitmq.ConsumerOptions{URL: "amqp://h", Queue: "q", SkipDeclare: true,
		Retry: &retry.Policy{Base: time.Hour, Cap: time.Second}}, nop)
	require.ErrorIs(t, err, rabbitmq.ErrInvalidOptions)
	require.ErrorIs(t, err, retry.ErrInvalidPolicy)
}

// TestNewPublisherRejectsBadOptions needs no broker either.
func TestNewPublisherRejectsBadOptions(t *testing.T) {
	_, err := rabbitmq.NewPublisher(nil)
	require.ErrorIs(t, err, rabbitmq.ErrInvalidOptions)
	require.ErrorContains(t, err, "URL is required")
	require.ErrorContains(t, err, "RoutingKey or Route is required")
	_, err = rabbitmq.NewPublisher(&rabbitmq.PublisherOptions{URL: "amqp://h", RoutingKey: "q", Config: amqp.Config{Recovery: &amqp.Recovery{}}})
	require.ErrorContains(t, err, "Config.Recovery must be nil")
}

// TestKeyOf reads the key from message_id or a named header, and refuses,
// permanently, what is missing or not a string.
func TestKeyOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      amqp.Delivery
		header string
		want   string
		bad    string
	}{
		{name: "message_id", d: amqp.Delivery{MessageId: "m-1"}, want: "m-1"},
		{name: "no message_id", d: amqp.Delivery{}, bad: "message_id is empty"},
		{name: "header", d: amqp.Delivery{MessageId: "x", Headers: amqp.Table{"event-id": "e-1"}}, header: "event-id", want: "e-1"},
		{name: "header as bytes", d: amqp.Delivery{Headers: amqp.Table{"event-id": []byte("e-2")}}, header: "event-id", want: "e-2"},
		{name: "header missing", d: amqp.Delivery{MessageId: "x"}, header: "event-id", bad: `no header "event-id"`},
		{name: "header not a string", d: amqp.Delivery{Headers: amqp.Table{"event-id": int64(7)}}, header: "event-id", bad: "holds a int64"},
		{name: "header empty", d: amqp.Delivery{Headers: amqp.Table{"event-id": ""}}, header: "event-id", bad: "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := rabbitmq.KeyOf(&tc.d, tc.header)
			if tc.bad == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, k)
				return
			}
			require.ErrorIs(t, err, rabbitmq.ErrNoKey)
			require.ErrorContains(t, err, tc.bad)
			require.True(t, oncekv.IsPermanent(err))
			require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
		})
	}
}

// TestJudge maps each kind of store answer to its verdict, on an injected
// clock.
func TestJudge(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "judge.db"), &oncekv.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	defer db.Close()
	ctx := t.Context()
	r, err := retry.New(&retry.Policy{Base: time.Second, Cap: time.Minute, MaxAttempts: 5})
	require.NoError(t, err)

	_, err = db.Claim(ctx, oncekv.Request{Handler: "h", Key: "held"}, 7*time.Second)
	require.NoError(t, err)
	now = now.Add(2 * time.Second)
	_, inProgress := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "held"}, nil)
	require.ErrorIs(t, inProgress, oncekv.ErrInProgress)
	_, failed := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "poison"}, func(*oncekv.Tx) ([]byte, error) {
		return nil, oncekv.Permanent(errors.New("poison"))
	})
	_, replayed := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "poison"}, nil)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k", Payload: []byte("a")}, nil)
	require.NoError(t, err)
	_, reused := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k", Payload: []byte("b")}, nil)
	_, noKey := rabbitmq.KeyOf(&amqp.Delivery{}, "")
	transient := errors.New("upstream timeout")

	for _, tc := range []struct {
		name    string
		err     error
		attempt int
		want    rabbitmq.Action
		delay   func(d time.Duration) bool
	}{
		{name: "applied or duplicate", want: rabbitmq.Ack},
		{name: "in progress: until the lease ends", err: inProgress, attempt: 9, want: rabbitmq.Requeue,
			delay: func(d time.Duration) bool { return d == 5*time.Second }},
		{name: "failed permanently", err: failed, attempt: 1, want: rabbitmq.DeadLetter},
		{name: "failed, replayed from the mark", err: replayed, attempt: 1, want: rabbitmq.DeadLetter},
		{name: "key reused", err: reused, attempt: 1, want: rabbitmq.DeadLetter},
		{name: "no key", err: noKey, attempt: 1, want: rabbitmq.DeadLetter},
		{name: "transient, first attempt", err: transient, attempt: 1, want: rabbitmq.Requeue,
			delay: func(d time.Duration) bool { return d >= 0 && d < time.Second }},
		{name: "transient with a Retry-After above MaxHold", err: retry.After(time.Hour, transient), attempt: 2, want: rabbitmq.Requeue,
			delay: func(d time.Duration) bool { return d == rabbitmq.MaxHold }},
		{name: "transient, attempts exhausted", err: transient, attempt: 5, want: rabbitmq.DeadLetter},
		{name: "version conflict: at once", err: oncekv.ErrVersionConflict, attempt: 1, want: rabbitmq.Requeue},
		{name: "store closed", err: oncekv.ErrClosed, attempt: 1, want: rabbitmq.Requeue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := rabbitmq.Judge(tc.err, tc.attempt, db.Now(), r)
			require.Equal(t, tc.want, v.Action, "verdict %v", v.Action)
			if tc.delay != nil {
				require.True(t, tc.delay(v.Delay), "delay %v", v.Delay)
			} else {
				require.Zero(t, v.Delay)
			}
		})
	}
}
