package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oncekv/oncekv/kafka"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

func producer(t testing.TB, addrs []string, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append(kafka.ProducerOpts(), kgo.SeedBrokers(addrs...)), extra...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// TestSenderRelaysTheOutboxWithKeyAndFence: a relay delivers a queue to a
// topic through the Sender; each record carries the message's key as its
// record key and in Idempotency-Key, its fencing token in Oncekv-Fence,
// and its body as the value; with KeyByOrderingKey an ordering key is the
// record key instead.
func TestSenderRelaysTheOutboxWithKeyAndFence(t *testing.T) {
	const topic = "outbox"
	c := newCluster(t, topic, 3)
	addrs := c.ListenAddrs()
	db := openDB(t)
	q, err := queue.Open(db, "outbox", nil)
	require.NoError(t, err)
	defer q.Close()
	ctx := context.Background()
	for _, m := range []queue.Message{{Key: "order-1", Body: []byte("2 apples")}, {Key: "order-2", Body: []byte("1 pear"), OrderingKey: "customer-7"}} {
		_, err := q.Enqueue(ctx, m)
		require.NoError(t, err)
	}
	send, err := kafka.NewSender(producer(t, addrs), kafka.SenderOptions{Topic: topic, KeyByOrderingKey: true})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx, q, send, nil) }()

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	got := make(map[string]*kgo.Record)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for len(got) < 2 {
		f := cl.PollFetches(pctx)
		require.NoError(t, pctx.Err())
		f.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = r })
	}
	stop()
	require.NoError(t, <-done)

	header := func(r *kgo.Record, name string) string {
		for _, h := range r.Headers {
			if h.Key == name {
				return string(h.Value)
			}
		}
		return ""
	}
	a, b := got["2 apples"], got["1 pear"]
	require.Equal(t, "order-1", string(a.Key))
	require.Equal(t, "order-1", header(a, kafka.DefaultKeyHeader))
	require.Equal(t, "customer-7", string(b.Key), "KeyByOrderingKey")
	require.Equal(t, "order-2", header(b, kafka.DefaultKeyHeader))
	for _, r := range []*kgo.Record{a, b} {
		tok, err := strconv.ParseUint(header(r, kafka.DefaultFenceHeader), 10, 64)
		require.NoError(t, err)
		require.Positive(t, tok)
	}
	require.Equal(t, "order-1", kafka.HeaderKey(kafka.DefaultKeyHeader)(a), "the consumer's key is the producer's")
}

// TestSenderClassifiesBrokerErrors: a broker error no retry can fix
// (MESSAGE_TOO_LARGE, TOPIC_AUTHORIZATION_FAILED) comes back permanent, so
// the relay dead-letters the message; one a retry can fix
// (NOT_ENOUGH_REPLICAS, once franz-go's own retries are spent) comes back
// transient; a message without a key is permanent and never produced.
func TestSenderClassifiesBrokerErrors(t *testing.T) {
	const topic = "t"
	ctx := context.Background()
	for _, tc := range []struct {
		err       *kerr.Error
		permanent bool
	}{
		{kerr.MessageTooLarge, true},
		{kerr.TopicAuthorizationFailed, true},
		{kerr.NotEnoughReplicas, false},
	} {
		t.Run(tc.err.Message, func(t *testing.T) {
			c := newCluster(t, topic, 1)
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: tc.err, Count: -1})
			send, err := kafka.NewSender(producer(t, c.ListenAddrs(), kgo.RecordRetries(2), kgo.RetryBackoffFn(func(int) time.Duration { return time.Millisecond })),
				kafka.SenderOptions{Topic: topic})
			require.NoError(t, err)
			err = send(ctx, &queue.Message{Key: "k", Body: []byte("v"), Token: 1})
			require.ErrorIs(t, err, tc.err)
			require.Equal(t, tc.permanent, retry.IsPermanent(err), "%v", err)
		})
	}
	c := newCluster(t, topic, 1)
	send, err := kafka.NewSender(producer(t, c.ListenAddrs()), kafka.SenderOptions{Topic: topic})
	require.NoError(t, err)
	err = send(ctx, &queue.Message{Body: []byte("no key")})
	require.ErrorIs(t, err, kafka.ErrInvalidKey)
	require.True(t, retry.IsPermanent(err))
	require.Zero(t, c.PartitionInfo(topic, 0).HighWatermark, "nothing produced")
}

// TestNewSenderRefusesSettingsThatBreakTheGuarantee: a nil client, a
// missing topic, one header for both values, and a producer without
// idempotence, with acks below all, with cancellable in-flight records or
// a transactional id are refused, each named.
func TestNewSenderRefusesSettingsThatBreakTheGuarantee(t *testing.T) {
	c := newCluster(t, "t", 1)
	addrs := c.ListenAddrs()
	_, err := kafka.NewSender(nil, kafka.SenderOptions{Topic: "t"})
	require.ErrorIs(t, err, kafka.ErrNilArgument)
	_, err = kafka.NewSender(producer(t, addrs), kafka.SenderOptions{KeyHeader: "X", FenceHeader: "X"})
	require.ErrorIs(t, err, kafka.ErrInvalidOptions)
	require.ErrorContains(t, err, "option Topic is required")
	require.ErrorContains(t, err, `both "X"`)

	for name, opts := range map[string][]kgo.Opt{
		"kgo.DisableIdempotentWrite":             {kgo.DisableIdempotentWrite()},
		"kgo.RequiredAcks":                       {kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())},
		"kgo.AllowIdempotentProduceCancellation": {kgo.AllowIdempotentProduceCancellation()},
		"kgo.TransactionalID":                    {kgo.TransactionalID("tx")},
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
		require.NoError(t, err, name)
		_, err = kafka.NewSender(cl, kafka.SenderOptions{Topic: "t"})
		cl.Close()
		require.ErrorIs(t, err, kafka.ErrClientConfig, name)
		require.ErrorContains(t, err, name)
	}
}
