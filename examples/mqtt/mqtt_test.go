package mqtt_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/brokertest"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/examples/mqtt"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// childEnv, when set, makes the test binary run a consumer (its value is
// the JSON of a childConfig) instead of the tests.
const childEnv = "ONCEKV_MQTT_CHILD"

type childConfig struct {
	DB       string
	Broker   string
	ClientID string
	Topic    string
}

func TestMain(m *testing.M) {
	brokertest.Main(m, childEnv, func(c *childConfig) string { return c.DB }, consume)
}

// consume is the consumer process: it applies messages until killed,
// printing "ready" once subscribed and "applied KEY" or "dup KEY" after
// each message it acknowledges. Before an "applied" line it prints
// "commit PID-N" when the store's count of commits that wrote marks, N,
// grew since the previous one: fewer commit lines than applied ones means
// messages shared commits.
func consume(ctx context.Context, db *oncekv.DB, c *childConfig) error {
	var commits uint64
	return mqtt.Consume(ctx, db, mqtt.ConsumerOptions{
		Broker: c.Broker, ClientID: c.ClientID, Topic: c.Topic,
		Retry:      &retry.Policy{Base: 10 * time.Millisecond, Cap: 200 * time.Millisecond, MaxAttempts: -1},
		Subscribed: func() { brokertest.Say("ready", "-") },
		OnResult: func(key string, res oncekv.Result, err error, acked bool) {
			switch {
			case err != nil && acked:
				brokertest.Say("failed", key) // recorded, acked: never back
			case err != nil:
				fmt.Fprintln(os.Stderr, "apply", key, err)
			case res.Duplicate:
				brokertest.Say("dup", key)
			default:
				if n := db.Stats().CommitHistograms.MarkCommits; n != commits {
					commits = n
					brokertest.Say("commit", fmt.Sprintf("%d-%d", os.Getpid(), n))
				}
				brokertest.Say("applied", key)
			}
		},
	})
}

// TestConsumerKilledAppliesEachOnce publishes readings through the outbox
// (and a share of them twice more, the duplicate a publisher that crashed
// between PUBACK and its ack sends), while the consumer, a child process
// with a persistent session that acks after the commit, is SIGKILLed at
// random points (between a commit and its ack among them) and restarted.
// At the end every key was applied exactly once in the consumer's store:
// none lost (the broker redelivered what was not acked: an ack sent before
// its commit would lose the message a kill then caught) and none twice
// (the store's marks answered the redeliveries); a poison reading recorded
// as failed and acked. The messages a restarted consumer finds waiting
// share commits: fewer commits than applied messages.
func TestConsumerKilledAppliesEachOnce(t *testing.T) {
	broker := brokertest.URL(t, "ONCEKV_MQTT_URL")
	run := brokertest.NewRun(t, childEnv)
	n := brokertest.Scale(300)
	cfg := childConfig{
		DB:       filepath.Join(t.TempDir(), "consumer.db"),
		Broker:   broker,
		ClientID: "oncekv-test-consumer-" + run.ID, // a fresh session for each run
		Topic:    "oncekv/test/" + run.ID + "/readings",
	}
	log := run.Log
	child := run.Start(cfg)
	// The first consumer creates the session; only then are messages kept
	// for it while it is away.
	require.Eventually(t, func() bool { return log.Count("ready") >= 1 }, 20*time.Second, 10*time.Millisecond)

	// The publisher: its own store, the outbox, and the delivery loop.
	pdb, err := oncekv.Open(filepath.Join(t.TempDir(), "publisher.db"), nil)
	require.NoError(t, err)
	defer pdb.Close()
	q, err := queue.Open(pdb, "outbox", &queue.Options{Retry: &retry.Policy{Base: 10 * time.Millisecond, Cap: 200 * time.Millisecond, MaxAttempts: -1}})
	require.NoError(t, err)
	pc := paho.NewClient(paho.NewClientOptions().AddBroker(broker).SetClientID("oncekv-test-publisher-" + run.ID))
	tok := pc.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	defer pc.Disconnect(250)
	send := mqtt.Sender(pc, cfg.Topic)
	ctx, cancel := context.WithCancel(context.Background())
	delivered := make(chan error, 1)
	go func() { delivered <- relay.Run(ctx, q, send, nil) }()

	run.KillRepeatedly(child, cfg)
	resent := 0
	// A poison reading: its effect fails permanently, the store records
	// the failure, and the consumer acks it rather than have it back at
	// every reconnect.
	poison := reading.Reading{Key: "r-poison", Poison: true}
	require.NoError(t, send(ctx, &queue.Message{Key: poison.Key, Body: reading.Encode(poison)}))
	for i := range n {
		r := reading.Reading{Key: fmt.Sprintf("r-%04d", i), Value: float64(i)}
		res, err := mqtt.Record(ctx, pdb, q, "sensor", r)
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		if i%5 == 0 {
			// The sensor's own retry: the publisher's store deduplicates it.
			res, err = mqtt.Record(ctx, pdb, q, "sensor", r)
			require.NoError(t, err)
			require.True(t, res.Duplicate)
			// And a second publish of the same message, as after a lost ack.
			require.NoError(t, send(ctx, &queue.Message{Key: r.Key, Body: reading.Encode(r)}))
			resent++
		}
		time.Sleep(10 * time.Millisecond) // spread the publishes over the kills
	}
	require.Eventually(t, func() bool {
		st, err := q.Stats()
		return err == nil && st.Depth == 0
	}, 20*time.Second, 20*time.Millisecond, "the outbox did not drain")
	st, err := q.Stats()
	require.NoError(t, err)
	require.Zero(t, st.Dead, "nothing dead-lettered")
	child, kills := run.Stop()
	require.Eventually(t, func() bool { return log.Keys("applied", "dup") == n }, 30*time.Second, 20*time.Millisecond,
		"the consumer did not see every key")
	cancel()
	require.NoError(t, <-delivered)
	require.Eventually(t, func() bool { return log.Keys("failed") == 1 }, 30*time.Second, 20*time.Millisecond,
		"the poison reading was not acked as failed")
	db := run.RequireAppliedOnce(child, cfg.DB, n) // the poison key not among them
	_, err = db.Apply(context.Background(), reading.Request("mqtt-readings", reading.Encode(poison), poison), nil)
	var fe *oncekv.FailedError
	require.ErrorAs(t, err, &fe, "the poison reading is recorded as failed")
	t.Logf("readings %d, resent %d, kills %d, applied lines %d, duplicates suppressed %d, poison acked as failed %d, commits before an applied line %d",
		n, resent, kills, log.Count("applied"), log.Count("dup"), log.Count("failed"), log.Count("commit"))
	require.Less(t, log.Count("commit"), log.Count("applied"), "every applied message had a commit of its own")
}

// TestConsumeRejectsMissingOptions needs no broker: a consumer without a
// broker, a session or a topic is refused before it connects, with every
// missing field named.
func TestConsumeRejectsMissingOptions(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "consumer.db"), nil)
	require.NoError(t, err)
	defer db.Close()
	err = mqtt.Consume(context.Background(), db, mqtt.ConsumerOptions{Broker: "tcp://127.0.0.1:1"})
	require.ErrorIs(t, err, mqtt.ErrInvalidOptions)
	require.ErrorContains(t, err, "oncekv: mqtt: ")
	require.ErrorContains(t, err, "ClientID is required")
	require.ErrorContains(t, err, "Topic is required")
	require.NotContains(t, err.Error(), "Broker is required")
}
