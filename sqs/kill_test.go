package sqs_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
	oncesqs "github.com/oncekv/oncekv/sqs"
)

// childEnv, when set, makes the test binary run one consumer (its value
// is a childConfig's JSON) instead of the tests.
const childEnv = "ONCEKV_SQS_CHILD"

type childConfig struct {
	Server, QueueURL, DB string
}

func TestMain(m *testing.M) {
	oncetest.ChildMain(m, childEnv, func(c *childConfig) string { return c.DB }, consume)
}

// consume is the consumer process: per batch, once it committed in the
// store, it prints "applied KEY" or "dup KEY" per message, then "batch",
// and waits for the parent's go-ahead before deleting: the window the
// parent kills it in.
func consume(ctx context.Context, db *oncekv.DB, c *childConfig) error {
	cons, err := oncesqs.NewConsumer(db, client(c.Server), count, oncesqs.Options{
		Handler: "orders", QueueURL: c.QueueURL, Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute),
		WaitTime: time.Second, Visibility: time.Second, Heartbeat: 300 * time.Millisecond, Logger: quiet,
		OnBatch: func(outs []oncesqs.Outcome) {
			oncetest.SayBatch(len(outs), func(i int) (string, bool) { return outs[i].Key, outs[i].Verdict == oncesqs.Duplicate })
		}})
	if err != nil {
		return err
	}
	return cons.Run(ctx)
}

// TestConsumerKilledAppliesEachOnce sends messages, a quarter of them
// twice (a producer's retry: a second message id, one key attribute),
// while the consumer, a child process, is SIGKILLed again and again:
// half the kills land in the window after its batch committed in the
// store and before the batch's deletes, the others at random instants
// (in a receive, in the middle of a batch, in a heartbeat). goaws lives in
// the test's process and outlives every consumer; each killed consumer's
// messages come back when their visibility (1s) ends. At the end every key
// is applied exactly once and the queue is empty.
func TestConsumerKilledAppliesEachOnce(t *testing.T) {
	url := server(t)
	c := client(url)
	qurl, _ := newQueue(t, c, time.Second, 0, false)
	ks := keys(soak(300))
	cfg := childConfig{Server: url, QueueURL: qurl, DB: t.TempDir() + "/consumer.db"}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 26))
	wantKills := soak(16)

	sent := make(chan int, 1)
	go func() {
		n := 0
		for i, k := range ks {
			for range 1 + btoi(i%4 == 0) {
				_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(qurl), MessageBody: aws.String("v-" + k),
					MessageAttributes: map[string]types.MessageAttributeValue{oncesqs.DefaultKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(k)}}})
				if err != nil {
					t.Errorf("send %s: %v", k, err)
				}
				n++
			}
			time.Sleep(5 * time.Millisecond) // spread the sends over the kills
		}
		sent <- n
	}()

	total := -1
	ch := oncetest.NewChaos(t, childEnv, cfg)
	timer := time.After(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
	deadline := time.After(100 * time.Second)
	for total < 0 || depth(t, c, qurl) > 0 || ch.Owed() > 0 {
		select {
		case n := <-sent:
			total = n
		case <-deadline:
			t.Fatalf("not done after 100s: depth %d, kills %d, owed %d", depth(t, c, qurl), ch.Kills, ch.Owed())
		case <-timer:
			if ch.Kills < wantKills && ch.Kills%2 == 0 {
				ch.Kill(false) // anywhere: in a receive, a batch, a heartbeat
			}
			timer = time.After(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
		case line, ok := <-ch.Lines:
			switch {
			case !ok:
				ch.Exited()
			case !ch.Line(line):
			case ch.Kills < wantKills && ch.Kills%2 == 1:
				ch.Kill(true) // after the store commit, before the delete
			default:
				ch.EndBatch()
			}
		}
	}
	ch.Stop()

	require.Equal(t, wantKills, ch.Kills)
	require.Zero(t, ch.Owed(), "every batch killed before its delete came back and was suppressed")
	db, err := oncekv.Open(cfg.DB, nil)
	require.NoError(t, err)
	defer db.Close()
	requireOnce(t, db, ks)
	require.Positive(t, ch.Dups)
	require.Equal(t, len(ks)+len(ks)/4, total)
	t.Logf("rounds %d, kills %d (%d after the store commit and before the delete, %d at random instants), messages sent %d (%d keys), applied %d (each once, read from the store; %d reported before a kill), duplicates suppressed %d, lost 0, doubled 0",
		ch.Rounds, ch.Kills, ch.WindowKills, ch.Kills-ch.WindowKills, total, len(ks), len(ks), ch.Applied, ch.Dups)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
