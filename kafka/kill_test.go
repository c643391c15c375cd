package kafka_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
	"github.com/oncekv/oncekv/kafka"
)

// childEnv, when set, makes the test binary run one consumer (its value
// is a childConfig's JSON) instead of the tests.
const childEnv = "ONCEKV_KAFKA_CHILD"

type childConfig struct {
	Brokers      []string
	Topic, Group string
	DB           string
}

func TestMain(m *testing.M) {
	oncetest.ChildMain(m, childEnv, func(c *childConfig) string { return c.DB }, consume)
}

// consume is the consumer process. For each batch, once it committed in
// the store, it prints "applied KEY" or "dup KEY" per record, then
// "batch", and waits for the parent's go-ahead before the offset commit:
// the window the parent kills it in.
func consume(ctx context.Context, db *oncekv.DB, c *childConfig) error {
	// A static member: the next process takes the killed one's place at
	// once instead of waiting for its session to time out.
	cl, err := kgo.NewClient(append(kafka.ConsumerOpts(c.Group, c.Topic),
		kgo.SeedBrokers(c.Brokers...), kgo.InstanceID("consumer"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	cons, err := kafka.NewConsumer(db, cl, count, kafka.Options{
		Handler: "payment_captured", Key: kafka.HeaderKey(kafka.DefaultKeyHeader), MaxRecords: 50, Logger: quiet,
		OnBatch: func(outs []kafka.Outcome) {
			oncetest.SayBatch(len(outs), func(i int) (string, bool) { return outs[i].Key, outs[i].Verdict == kafka.Duplicate })
		}})
	if err != nil {
		return err
	}
	return cons.Run(ctx)
}

// TestKillBetweenStoreCommitAndOffsetCommit SIGKILLs a real consumer
// process, many times, in the window the article names as the most
// valuable test: after the batch's effects committed in the store, before
// the batch's offsets are committed. The broker (kfake, on 127.0.0.1)
// lives in the test's process and outlives every consumer. Each killed
// batch comes back to the next consumer, whose store answers every record
// of it as a duplicate; at the end every key is applied exactly once and
// every offset is committed. A quarter of the keys is also produced twice
// (a producer retry: two offsets, one key).
func TestKillBetweenStoreCommitAndOffsetCommit(t *testing.T) {
	const topic, group = "payments", "billing"
	c := newCluster(t, topic, 3)
	addrs := c.ListenAddrs()
	ks := keys(soak(600))
	var again []string
	for i := 0; i < len(ks); i += 4 {
		again = append(again, ks[i])
	}
	produce(t, addrs, topic, ks...)
	produce(t, addrs, topic, again...)
	total := int64(len(ks) + len(again))
	cfg := childConfig{Brokers: addrs, Topic: topic, Group: group, DB: t.TempDir() + "/consumer.db"}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 26))
	wantKills := soak(8)
	ch := oncetest.NewChaos(t, childEnv, cfg)
	deadline := time.After(90 * time.Second)
	for sum(committed(c, group, topic)) < total {
		select {
		case <-deadline:
			t.Fatalf("not done after 90s: committed %d of %d, kills %d", sum(committed(c, group, topic)), total, ch.Kills)
		case line, ok := <-ch.Lines:
			switch {
			case !ok:
				ch.Exited()
			case !ch.Line(line):
			case ch.Kills < wantKills && rng.IntN(3) != 0:
				ch.Kill(true) // the child pauses in the window: after the store commit, before the offset commit
			default:
				ch.EndBatch()
			}
		case <-time.After(20 * time.Millisecond):
		}
	}
	ch.Stop()

	require.Equal(t, wantKills, ch.Kills, "kills in the window")
	require.Zero(t, ch.Owed(), "every killed batch was delivered again and suppressed")
	db, err := oncekv.Open(cfg.DB, nil)
	require.NoError(t, err)
	defer db.Close()
	requireOnce(t, db, ks)
	t.Logf("rounds %d, kills %d (each after the store commit, before the offset commit), records %d (%d keys, %d produced twice), applied %d (each once, read from the store), duplicates suppressed %d, lost 0, doubled 0",
		ch.Rounds, ch.Kills, total, len(ks), len(again), len(ks), ch.Dups)
}
