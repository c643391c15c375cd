package nats_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/brokertest"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/examples/nats"
	"github.com/oncekv/oncekv/retry"
)

// childEnv, when set, makes the test binary run a consumer (its value is
// the JSON of a childConfig) instead of the tests.
const childEnv = "ONCEKV_NATS_CHILD"

type childConfig struct {
	DB      string
	URL     string
	Stream  string
	Durable string
	Hold    string // a key to claim for 3s before consuming
}

func TestMain(m *testing.M) {
	brokertest.Main(m, childEnv, func(c *childConfig) string { return c.DB }, consume)
}

// consume is the consumer process: it consumes until killed, printing
// one line per verdict: "applied KEY", "dup KEY", "nak KEY" or "term KEY".
func consume(ctx context.Context, db *oncekv.DB, c *childConfig) error {
	nc, err := natsgo.Connect(c.URL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if c.Hold != "" {
		r := reading.Reading{Key: c.Hold}
		if _, err := db.Claim(ctx, reading.Request("nats-readings", reading.Encode(r), r), 3*time.Second); err != nil {
			return fmt.Errorf("claim %s: %w", c.Hold, err)
		}
	}
	return nats.Consume(ctx, db, js, nats.ConsumerOptions{
		Stream: c.Stream, Durable: c.Durable, AckWait: 2 * time.Second,
		Batch: 50, MaxWait: 500 * time.Millisecond,
		Retry: &retry.Policy{Base: 50 * time.Millisecond, Cap: 500 * time.Millisecond},
		OnVerdict: func(key string, v nats.Verdict, res oncekv.Result, err error) {
			switch {
			case v.Action == nats.Ack && res.Duplicate:
				brokertest.Say("dup", key)
			case v.Action == nats.Ack:
				brokertest.Say("applied", key)
			default:
				brokertest.Say(v.Action.String(), key)
			}
		},
	})
}

// TestJudge maps each kind of store answer to its JetStream verdict, on an
// injected clock: ack, term for what can never succeed, nak after the
// backoff for what may, and nak until the holder's lease ends for a
// claimed key.
func TestJudge(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "judge.db"), &oncekv.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	r, err := retry.New(&retry.Policy{Base: time.Second, Cap: time.Minute, MaxAttempts: 5, Rand: rand.NewPCG(1, 2)})
	require.NoError(t, err)

	claim, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "held"}, 7*time.Second)
	require.NoError(t, err)
	require.NotNil(t, claim)
	now = now.Add(2 * time.Second)
	_, inProgress := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "held"}, nil)
	require.ErrorIs(t, inProgress, oncekv.ErrInProgress)

	_, failed := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "poison"}, func(*oncekv.Tx) ([]byte, error) {
		return nil, oncekv.Permanent(errors.New("poison"))
	})
	var fe *oncekv.FailedError
	require.ErrorAs(t, failed, &fe)
	_, replayed := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "poison"}, nil)
	require.ErrorAs(t, replayed, &fe, "a redelivery of the poison message")

	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k", Payload: []byte("a")}, nil)
	require.NoError(t, err)
	_, reused := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k", Payload: []byte("b")}, nil)
	require.ErrorIs(t, reused, oncekv.ErrKeyReuse)

	_, badPayload := reading.Decode([]byte("{not json"))
	require.ErrorIs(t, badPayload, reading.ErrBadPayload)
	transient := errors.New("upstream timeout")

	for _, tc := range []struct {
		name    string
		err     error
		attempt int
		want    nats.Action
		delay   func(d time.Duration)
	}{
		{name: "applied or duplicate", err: nil, attempt: 1, want: nats.Ack},
		{name: "in progress: until the lease ends", err: inProgress, attempt: 1, want: nats.Nak,
			delay: func(d time.Duration) { require.Equal(t, 5*time.Second, d) }},
		{name: "failed permanently", err: failed, attempt: 1, want: nats.Term},
		{name: "failed, replayed from the mark", err: replayed, attempt: 1, want: nats.Term},
		{name: "key reused", err: reused, attempt: 1, want: nats.Term},
		{name: "bad payload", err: badPayload, attempt: 1, want: nats.Term},
		{name: "transient, first attempt", err: transient, attempt: 1, want: nats.Nak,
			delay: func(d time.Duration) { require.True(t, d >= 0 && d < time.Second, "delay %v", d) }},
		{name: "transient, third attempt", err: transient, attempt: 3, want: nats.Nak,
			delay: func(d time.Duration) { require.True(t, d >= 0 && d < 4*time.Second, "delay %v", d) }},
		{name: "transient with a Retry-After", err: retry.After(30*time.Second, transient), attempt: 1, want: nats.Nak,
			delay: func(d time.Duration) { require.Equal(t, 30*time.Second, d) }},
		{name: "transient, attempts exhausted", err: transient, attempt: 5, want: nats.Term},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := nats.Judge(tc.err, tc.attempt, db.Now(), r)
			require.Equal(t, tc.want, v.Action, "verdict %v", v.Action)
			if tc.delay != nil {
				tc.delay(v.Delay)
			} else {
				require.Zero(t, v.Delay)
			}
		})
	}
}

// TestConsumerKilledAppliesEachOnce publishes readings to a stream, a
// quarter of them twice under two JetStream sequences (no Nats-Msg-Id, so
// the broker cannot tell), a poison reading and one whose key a claim
// holds, while the pull consumer, a child process, is SIGKILLed at random
// points and restarted. At the end: every key applied exactly once, none
// lost; the poison message terminated and recorded as failed, not
// redelivered forever; the held key nakked until its lease ended, then
// applied; nothing left pending in the consumer.
func TestConsumerKilledAppliesEachOnce(t *testing.T) {
	url := brokertest.URL(t, "ONCEKV_NATS_URL")
	run := brokertest.NewRun(t, childEnv)
	n := brokertest.Scale(300)
	cfg := childConfig{
		DB:      filepath.Join(t.TempDir(), "consumer.db"),
		URL:     url,
		Stream:  "ONCEKV_TEST_" + run.ID,
		Durable: "readings",
	}
	subject := "oncekv.test." + run.ID + ".readings"
	ctx := context.Background()

	nc, err := natsgo.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	defer func() { require.NoError(t, js.DeleteStream(ctx, cfg.Stream)) }()

	log := run.Log
	// The first consumer also holds a claim on one key, as another worker
	// of its process would: the consumer must come back when the claim's
	// lease ends, not spin on it, and then take the key over. (A claim
	// does not outlive its process: the next Open releases it.)
	const held = "r-held"
	first := cfg
	first.Hold = held
	child := run.Start(first)
	publish := func(r reading.Reading) {
		_, err := js.Publish(ctx, subject, reading.Encode(r))
		require.NoError(t, err)
	}
	publish(reading.Reading{Key: held})
	publish(reading.Reading{Key: "r-poison", Poison: true})
	// The first consumer naks the held key before any kill can hide it.
	require.Eventually(t, func() bool { return log.Count("nak") > 0 }, 20*time.Second, 10*time.Millisecond,
		"the held key was not nakked")

	run.KillRepeatedly(child, cfg)
	dups := 0
	for i := range n {
		r := reading.Reading{Key: fmt.Sprintf("r-%04d", i), Value: float64(i)}
		publish(r)
		if i%4 == 0 {
			publish(r)
			dups++
		}
		time.Sleep(10 * time.Millisecond) // spread the publishes over the kills
	}
	child, kills := run.Stop()

	want := n + 1 // the readings and the held key
	require.Eventually(t, func() bool {
		return log.Keys("applied", "dup") == want && log.Keys("term") == 1
	}, 30*time.Second, 20*time.Millisecond, "the consumer did not see every key")
	cons, err := stream.Consumer(ctx, cfg.Durable)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, 30*time.Second, 50*time.Millisecond, "messages left pending: the poison one redelivered forever?")
	db := run.RequireAppliedOnce(child, cfg.DB, want) // the poison key not among them
	poison := reading.Encode(reading.Reading{Key: "r-poison", Poison: true})
	_, err = db.Apply(ctx, reading.Request("nats-readings", poison, reading.Reading{Key: "r-poison"}), nil)
	var fe *oncekv.FailedError
	require.ErrorAs(t, err, &fe, "the poison reading is recorded as failed")
	// Only the held key is nakked: at its first delivery, and maybe again
	// before the first kill released its claim; never spun on.
	require.LessOrEqual(t, log.Count("nak"), 3, "the held key was redelivered before its lease's end")
	t.Logf("readings %d, published twice %d, kills %d, applied lines %d, duplicates suppressed %d, naks %d, terms %d",
		n, dups, kills, log.Count("applied"), log.Count("dup"), log.Count("nak"), log.Count("term"))
}

// TestConsumeRejectsMissingOptions needs no server: a consumer without a
// stream or a durable name is refused before it calls JetStream, with
// every missing field named.
func TestConsumeRejectsMissingOptions(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "consumer.db"), nil)
	require.NoError(t, err)
	defer db.Close()
	err = nats.Consume(context.Background(), db, nil, nats.ConsumerOptions{Stream: "S"})
	require.ErrorIs(t, err, nats.ErrInvalidOptions)
	require.ErrorContains(t, err, "oncekv: nats: ")
	require.ErrorContains(t, err, "Durable is required")
	require.NotContains(t, err.Error(), "Stream is required")
}
