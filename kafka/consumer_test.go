package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/kafka"
	"github.com/oncekv/oncekv/retry"
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

// TestNewConsumerRejectsBadInput: nil arguments, missing options and a
// client whose settings break the guarantee are refused with typed errors
// naming each problem, before anything is polled.
func TestNewConsumerRejectsBadInput(t *testing.T) {
	const topic = "t"
	c := newCluster(t, topic, 1)
	db := openDB(t)
	good := consumerClient(t, c.ListenAddrs(), "g", topic)
	opts := kafka.Options{Handler: "h", Key: kafka.RecordKey}

	_, err := kafka.NewConsumer(nil, good, count, opts)
	require.ErrorIs(t, err, kafka.ErrNilArgument)
	_, err = kafka.NewConsumer(db, nil, count, opts)
	require.ErrorIs(t, err, kafka.ErrNilArgument)
	_, err = kafka.NewConsumer(db, good, nil, opts)
	require.ErrorIs(t, err, kafka.ErrNilArgument)

	_, err = kafka.NewConsumer(db, good, count, kafka.Options{MaxRecords: -1, Retry: &retry.Policy{Base: -time.Second}})
	require.ErrorIs(t, err, kafka.ErrInvalidOptions)
	for _, field := range []string{"Handler", "Key", "MaxRecords", "Retry"} {
		require.ErrorContains(t, err, field)
	}

	bare, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic))
	require.NoError(t, err)
	defer bare.Close()
	_, err = kafka.NewConsumer(db, bare, count, opts)
	require.ErrorIs(t, err, kafka.ErrClientConfig)
	for _, opt := range []string{"kgo.ConsumerGroup", "kgo.DisableAutoCommit", "kgo.BlockRebalanceOnPoll"} {
		require.ErrorContains(t, err, opt)
	}
	// Another group: a member of "g" that never polls would hold the
	// partition the consumer below needs.
	autoCommit, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("other"), kgo.ConsumeTopics(topic), kgo.BlockRebalanceOnPoll())
	require.NoError(t, err)
	_, err = kafka.NewConsumer(db, autoCommit, count, opts)
	autoCommit.Close()
	require.ErrorIs(t, err, kafka.ErrClientConfig)
	require.ErrorContains(t, err, "kgo.DisableAutoCommit")
	require.NotContains(t, err.Error(), "kgo.ConsumerGroup")

	var cons *kafka.Consumer
	second := make(chan error, 1)
	opts.OnBatch = func([]kafka.Outcome) { second <- cons.Run(context.Background()) }
	cons, err = kafka.NewConsumer(db, good, count, opts)
	require.NoError(t, err)
	produce(t, c.ListenAddrs(), topic, "k")
	stop := run(t, cons)
	select {
	case err := <-second:
		require.ErrorIs(t, err, kafka.ErrRunning, "a second Run while the first runs")
	case <-time.After(20 * time.Second):
		t.Fatal("the consumer never polled the record")
	}
	stop()
}

// TestRecordsThatCanNeverSucceedAreGivenUp: a record without a key, one
// whose key is over the store's limit, one whose key was used before with
// another payload, and one whose effect fails permanently are each handed
// to DeadLetter with a *RecordError naming the record and the cause, and
// their offsets committed, so they block nothing; the records around them
// are applied once.
func TestRecordsThatCanNeverSucceedAreGivenUp(t *testing.T) {
	const topic, group = "orders", "g"
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	huge := strings.Repeat("x", 40000)
	prod, err := kgo.NewClient(append(kafka.ProducerOpts(), kgo.SeedBrokers(addrs...))...)
	require.NoError(t, err)
	defer prod.Close()
	rec := func(key, value string) *kgo.Record {
		r := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}
		if key != "" {
			r.Headers = []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(key)}}
		}
		return r
	}
	require.NoError(t, prod.ProduceSync(context.Background(),
		rec("a", "v-a"), rec("", "no key"), rec(huge, "huge"), rec("a", "another payload"),
		rec("poison", "v-poison"), rec("b", "v-b")).FirstErr())

	db := openDB(t)
	var dead []error
	poisoned := errors.New("cannot parse")
	effect := func(tx *oncekv.Tx, r *kgo.Record) ([]byte, error) {
		if string(r.Key) == "poison" {
			return nil, oncekv.Permanent(poisoned)
		}
		return count(tx, r)
	}
	cons, err := kafka.NewConsumer(db, consumerClient(t, addrs, group, topic), effect, kafka.Options{
		Handler: "h", Key: kafka.HeaderKey(kafka.DefaultKeyHeader), Logger: quiet,
		DeadLetter: func(_ context.Context, r *kgo.Record, err error) error {
			dead = append(dead, err) // Run's goroutine only
			return nil
		}})
	require.NoError(t, err)
	stop := run(t, cons)
	require.Eventually(t, func() bool { return sum(committed(c, group, topic)) == 6 }, 10*time.Second, 10*time.Millisecond)
	stop()

	requireOnce(t, db, []string{"a", "b"})
	require.Len(t, dead, 4)
	for i, want := range []error{kafka.ErrNoKey, oncekv.ErrKeyTooLarge, oncekv.ErrKeyReuse, poisoned} {
		require.ErrorIs(t, dead[i], want)
		var re *kafka.RecordError
		require.ErrorAs(t, dead[i], &re)
		require.Equal(t, topic, re.Topic)
		require.Equal(t, int64(i+1), re.Offset)
	}
	var fe *oncekv.FailedError
	require.ErrorAs(t, dead[3], &fe, "the permanent failure is recorded, so a redelivery replays it")
	require.Less(t, len(dead[2].Error()), 400, "the error quotes a bounded part of the key")
	require.Equal(t, uint64(4), cons.Stats().GaveUp)
}

// TestTransientFailureRewindsItsPartition: an effect that fails twice in a
// way a retry can fix rewinds its partition to the record, which is polled
// again after the backoff and applied once; the records after it in its
// partition are applied after it, and its offset is never committed
// before it succeeded. A DeadLetter that fails keeps a poison record the
// same way, until it succeeds.
func TestTransientFailureRewindsItsPartition(t *testing.T) {
	const topic, group = "orders", "g"
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, "a", "flaky", "b", "poison", "c")
	db := openDB(t)
	var order []string
	flaky, deadFails := 2, 1
	effect := func(tx *oncekv.Tx, r *kgo.Record) ([]byte, error) {
		switch string(r.Key) {
		case "flaky":
			if flaky > 0 {
				flaky--
				return nil, errors.New("upstream timeout")
			}
		case "poison":
			return nil, oncekv.Permanent(errors.New("bad"))
		}
		tx.OnCommit(func() { order = append(order, string(r.Key)) })
		return count(tx, r)
	}
	var seen []kafka.Verdict
	cons, err := kafka.NewConsumer(db, consumerClient(t, addrs, group, topic), effect, kafka.Options{
		Handler: "h", Key: kafka.RecordKey, Logger: quiet,
		Retry: &retry.Policy{Base: time.Millisecond, Cap: 10 * time.Millisecond},
		DeadLetter: func(context.Context, *kgo.Record, error) error {
			if deadFails > 0 {
				deadFails--
				return errors.New("dead-letter topic unavailable")
			}
			return nil
		},
		OnBatch: func(outs []kafka.Outcome) {
			for _, o := range outs {
				if string(o.Record.Key) == "flaky" {
					seen = append(seen, o.Verdict)
				}
			}
		}})
	require.NoError(t, err)
	stop := run(t, cons)
	require.Eventually(t, func() bool { return sum(committed(c, group, topic)) == 5 }, 10*time.Second, 10*time.Millisecond)
	stop()

	requireOnce(t, db, []string{"a", "flaky", "b", "c"})
	require.Equal(t, []string{"a", "flaky", "b", "c"}, dedupe(order), "applied in partition order")
	require.Equal(t, []kafka.Verdict{kafka.Retry, kafka.Retry, kafka.Applied}, seen[:3])
	s := cons.Stats()
	require.Equal(t, uint64(3), s.Retries, "two effect failures and one dead-letter failure")
	require.Equal(t, uint64(1), s.GaveUp)
}

// dedupe drops repeats, keeping first occurrences: a record after a
// failed one in its partition may be applied before the rewind, then come
// back as a duplicate.
func dedupe(xs []string) []string {
	seen := make(map[string]bool)
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// TestKeyFuncs: HeaderKey reads the first header of its name (Kafka
// compares header keys case-sensitively), RecordKey the record key,
// CoordinatesKey topic/partition/offset; a missing key is empty (ErrNoKey).
func TestKeyFuncs(t *testing.T) {
	r := &kgo.Record{Topic: "payments", Partition: 7, Offset: 88133612, Key: []byte("customer-1"),
		Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte("other case")}, {Key: kafka.DefaultKeyHeader, Value: []byte("evt_01HXQ8K2")}, {Key: kafka.DefaultKeyHeader, Value: []byte("second")}}}
	require.Equal(t, "evt_01HXQ8K2", kafka.HeaderKey(kafka.DefaultKeyHeader)(r))
	require.Empty(t, kafka.HeaderKey("Missing")(r))
	require.Equal(t, "customer-1", kafka.RecordKey(r))
	require.Equal(t, "payments/7/88133612", kafka.CoordinatesKey(r))
	require.Empty(t, kafka.RecordKey(&kgo.Record{}))
}
