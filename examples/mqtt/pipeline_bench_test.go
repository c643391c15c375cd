package mqtt_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/examples/mqtt"
)

// brokerWindow is how many unacked QoS 1 messages the benchmark's broker
// has in flight for the session: mosquitto's max_inflight_messages default,
// and .ci/brokers.sh's setting.
const brokerWindow = 20

// sequentialHandler is the delivery handler Consume had before Pipeline:
// Apply, wait for its commit, then ack, one message at a time.
func sequentialHandler(ctx context.Context, db *oncekv.DB) paho.MessageHandler {
	return func(_ paho.Client, m paho.Message) {
		rd, err := reading.Decode(m.Payload())
		if err == nil {
			payload := m.Payload()
			_, err = db.Apply(ctx, reading.Request("mqtt-readings", payload, rd), func(tx *oncekv.Tx) ([]byte, error) {
				return nil, reading.Store(tx, payload, rd)
			})
		}
		if err == nil {
			m.Ack()
		}
	}
}

// deliver hands n unique readings, named by prefix, to handle, one at a
// time as paho's delivery goroutine does, with at most brokerWindow of
// them unacked, as a broker holds back the session's next message until
// an ack frees a slot; it returns once all n are acked.
func deliver(n int, prefix string, handle paho.MessageHandler) time.Duration {
	window := make(chan struct{}, brokerWindow)
	acked := make(chan struct{}, n)
	start := time.Now()
	for i := range n {
		window <- struct{}{}
		r := reading.Reading{Key: fmt.Sprintf("%s-%08d", prefix, i), Value: float64(i)}
		handle(nil, &fakeMessage{payload: reading.Encode(r), id: uint16(i%65535 + 1), ack: func() {
			<-window
			acked <- struct{}{}
		}})
	}
	for range n {
		<-acked
	}
	return time.Since(start)
}

// BenchmarkConsumeHandler compares, in one run, on one durable store (an
// fsync per commit), the consumer's delivery handler before Pipeline
// (Apply, then ack) and Pipeline.Handle, each taking b.N unique readings
// from a broker that keeps brokerWindow messages in flight: msgs/s of
// each, and their ratio.
//
//	cd examples && go test -run '^$' -bench ConsumeHandler -benchtime 2000x -count 3 ./mqtt
func BenchmarkConsumeHandler(b *testing.B) {
	db, err := oncekv.Open(filepath.Join(b.TempDir(), "consumer.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	p, err := mqtt.NewPipeline(ctx, db, mqtt.ConsumerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	// Warm both paths (the buckets, the first window) outside the timing.
	deliver(50, "warm-seq", sequentialHandler(ctx, db))
	deliver(50, "warm-pipe", p.Handle)

	b.ResetTimer()
	seq := deliver(b.N, fmt.Sprintf("seq-%d", b.N), sequentialHandler(ctx, db))
	before := db.Stats()
	pipe := deliver(b.N, fmt.Sprintf("pipe-%d", b.N), p.Handle)
	h := db.Stats().Sub(before).CommitHistograms
	b.StopTimer()

	seqRate := float64(b.N) / seq.Seconds()
	pipeRate := float64(b.N) / pipe.Seconds()
	b.ReportMetric(seqRate, "seq-msgs/s")
	b.ReportMetric(pipeRate, "pipe-msgs/s")
	b.ReportMetric(pipeRate/seqRate, "x-pipe/seq")
	if h.MarkCommits > 0 {
		b.ReportMetric(float64(h.RequestSum)/float64(h.MarkCommits), "pipe-msgs/commit")
	}
}
