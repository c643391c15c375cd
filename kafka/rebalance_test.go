package kafka_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/kafka"
)

// TestRebalanceStallReprocessedAsDuplicates is the article's rebalance
// scene. Member billing-3 polls a batch and stalls in its effects past the
// rebalance timeout (Kafka's max.poll.interval.ms); billing-5 joins, the
// group kicks billing-3 out and hands billing-5 every partition, which
// fetches from the last committed offset: billing-3's whole batch again.
// Then billing-3 finishes: its effects commit in the store, its offset
// commit fails. billing-5's copies of that batch are suppressed as
// duplicates, logged with partition and offset, and counted; no key is
// applied twice and none is lost.
func TestRebalanceStallReprocessedAsDuplicates(t *testing.T) {
	const topic, group = "payments", "billing"
	c := newCluster(t, topic, 3)
	addrs := c.ListenAddrs()
	ks := keys(soak(300))
	produce(t, addrs, topic, ks...)
	db := openDB(t)

	var (
		once     sync.Once
		stalled  = make(chan struct{})
		release  = make(chan struct{})
		firstLen int
	)
	stall := func(tx *oncekv.Tx, r *kgo.Record) ([]byte, error) {
		once.Do(func() {
			close(stalled)
			<-release // the slow handler: 40s in the article
		})
		return count(tx, r)
	}
	logsA, logsB := &logLines{}, &logLines{}
	a, err := kafka.NewConsumer(db, consumerClient(t, addrs, group, topic, kgo.ClientID("billing-3")), stall,
		kafka.Options{Handler: "payment_captured", Key: kafka.HeaderKey(kafka.DefaultKeyHeader), MaxRecords: 500,
			Logger: slog.New(logsA),
			OnBatch: func(outs []kafka.Outcome) {
				if firstLen == 0 {
					firstLen = len(outs)
				}
			}})
	require.NoError(t, err)
	stopA := run(t, a)
	<-stalled

	b, err := kafka.NewConsumer(db, consumerClient(t, addrs, group, topic, kgo.ClientID("billing-5")), count,
		kafka.Options{Handler: "payment_captured", Key: kafka.HeaderKey(kafka.DefaultKeyHeader), Logger: slog.New(logsB)})
	require.NoError(t, err)
	stopB := run(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = c.WaitGroupInfo(ctx, group, func(g *kfake.GroupInfo) bool {
		return g.State == "Stable" && len(g.Members) == 1 && g.Members[0].ClientID == "billing-5" && g.NumAssigned() == 3
	})
	require.NoError(t, err, "billing-3 was not kicked out of the group")
	close(release)

	require.Eventually(t, func() bool {
		return a.Stats().CommitFailures > 0 && sum(committed(c, group, topic)) == int64(len(ks))
	}, 20*time.Second, 20*time.Millisecond, "billing-3's commit failed and every offset was committed")
	stopA()
	stopB()

	requireOnce(t, db, ks)
	sa, sb := a.Stats(), b.Stats()
	require.Positive(t, firstLen)
	require.GreaterOrEqual(t, sb.Duplicates, uint64(firstLen), "billing-5 got billing-3's batch again, as duplicates")
	require.Equal(t, uint64(len(ks)), sa.Applied+sb.Applied, "every key applied once, by one member or the other")
	failed := logsA.with("offset commit failed")
	require.NotEmpty(t, failed)
	t.Logf("billing-3: %s: %v", failed[0].msg, failed[0].attrs["err"])
	dups := logsB.with("duplicate suppressed")
	require.Len(t, dups, int(sb.Duplicates))
	for _, k := range []string{"handler", "key", "age_ms", "topic", "partition", "offset"} {
		require.Contains(t, dups[0].attrs, k)
	}
	require.Equal(t, slog.LevelInfo, dups[0].level)
	t.Logf("batch of billing-3 %d records; billing-3 applied %d, commit failures %d; billing-5 applied %d, duplicates suppressed %d; keys %d, lost 0, doubled 0",
		firstLen, sa.Applied, sa.CommitFailures, sb.Applied, sb.Duplicates, len(ks))
}
