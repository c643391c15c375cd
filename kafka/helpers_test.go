package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/applycount"
	"github.com/oncekv/oncekv/internal/oncetest"
	"github.com/oncekv/oncekv/kafka"
)

// The tests run against kfake, franz-go's in-process Kafka-protocol
// cluster: no Kafka broker can be installed where they run.

// newCluster starts a one-broker kfake cluster on 127.0.0.1 with topic
// (of partitions partitions) and short group timeouts, closed when the
// test ends.
func newCluster(t testing.TB, topic string, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// consumerClient returns a group consumer of topic on c with the options
// the Consumer requires, and fast heartbeats and rebalances; closed when
// the test ends.
func consumerClient(t testing.TB, addrs []string, group, topic string, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts := append(kafka.ConsumerOpts(group, topic),
		kgo.SeedBrokers(addrs...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(3*time.Second), // a loaded CI machine may miss a beat or two
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.RebalanceTimeout(time.Second),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	cl, err := kgo.NewClient(append(opts, extra...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// produce writes one record per key to topic, the key in the
// Idempotency-Key header and the value "v-KEY", and waits for the acks.
func produce(t testing.TB, addrs []string, topic string, keys ...string) {
	t.Helper()
	cl, err := kgo.NewClient(append(kafka.ProducerOpts(), kgo.SeedBrokers(addrs...))...)
	require.NoError(t, err)
	defer cl.Close()
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte("v-" + k),
			Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(k)}}}
	}
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
}

// keys returns n keys "k-0000", ...
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k-%04d", i)
	}
	return out
}

// count is the effect of the tests: one more to the record key's count,
// in the store's transaction (see applycount).
func count(tx *oncekv.Tx, r *kgo.Record) ([]byte, error) {
	return nil, applycount.Add(tx, string(r.Key))
}

// requireOnce requires that exactly want were applied, each once.
func requireOnce(t testing.TB, db *oncekv.DB, want []string) {
	t.Helper()
	oncetest.RequireAppliedOnce(t, db, want)
}

// committed returns the group's committed offset of each partition of
// topic, read from the cluster.
func committed(c *kfake.Cluster, group, topic string) map[int32]int64 {
	out := make(map[int32]int64)
	if g := c.GroupInfo(group); g != nil {
		for p, cm := range g.Commits[topic] {
			out[p] = cm.Offset
		}
	}
	return out
}

// sum adds the offsets up: with one record per offset and no gaps, the
// number of records committed.
func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// soak returns n times ONCEKV_KAFKA_SOAK when that is a positive integer.
func soak(n int) int { return oncetest.Soak("ONCEKV_KAFKA_SOAK", n) }

// openDB opens a store in the test's temporary directory, closed and
// checked when the test ends.
func openDB(t testing.TB) *oncekv.DB { return oncetest.Open(t, nil) }

// run runs c until stop is called, which waits for Run to return and
// requires it returned nil.
func run(t testing.TB, c *kafka.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := c.Run(ctx)
		if ctx.Err() == nil {
			t.Errorf("Run returned before it was stopped: %v", err)
		}
		done <- err
	}()
	return func() {
		cancel()
		require.NoError(t, <-done)
	}
}

// logLines is a slog.Handler that keeps every record's level, message and
// attributes, for tests to look at.
type logLines struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	line := logLine{level: r.Level, msg: r.Message, attrs: make(map[string]any)}
	r.Attrs(func(a slog.Attr) bool {
		line.attrs[a.Key] = a.Value.Any()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	return nil
}

// with returns the lines whose message contains msg.
func (l *logLines) with(msg string) []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logLine
	for _, line := range l.lines {
		if strings.Contains(line.msg, msg) {
			out = append(out, line)
		}
	}
	return out
}

// quiet is the logger of tests that do not look at the log.
var quiet = slog.New(slog.DiscardHandler)
