package kafka_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kafka"
)

// TestConsumerAppliesEachKeyOnce produces records a quarter of which are
// produced twice (a producer's retry without idempotence: two offsets, one
// key) and requires each key applied once, the second copies suppressed
// and counted, and every offset committed.
func TestConsumerAppliesEachKeyOnce(t *testing.T) {
	const topic, group = "payments", "billing"
	c := newCluster(t, topic, 3)
	addrs := c.ListenAddrs()
	ks := keys(200)
	var again []string
	for i := 0; i < len(ks); i += 4 {
		again = append(again, ks[i])
	}
	produce(t, addrs, topic, ks...)
	produce(t, addrs, topic, again...)

	db := openDB(t)
	cons, err := kafka.NewConsumer(db, consumerClient(t, addrs, group, topic), count,
		kafka.Options{Handler: "payment_captured", Key: kafka.HeaderKey(kafka.DefaultKeyHeader), MaxRecords: 50, Logger: quiet})
	require.NoError(t, err)
	stop := run(t, cons)
	total := int64(len(ks) + len(again))
	require.Eventually(t, func() bool { return sum(committed(c, group, topic)) == total },
		20*time.Second, 20*time.Millisecond, "every offset committed")
	stop()

	requireOnce(t, db, ks)
	s := cons.Stats()
	require.Equal(t, uint64(len(again)), s.Duplicates, "the second copies are suppressed")
	require.Equal(t, uint64(len(ks)), s.Applied)
	require.Zero(t, s.GaveUp)
	require.Zero(t, s.CommitFailures)
}
