package mqtt_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
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

// BenchmarkConsumeFromBroker compares, in one run, against a real
// mosquitto (.ci/brokers.sh starts one, 20 messages in flight per
// session), two consumers each draining a backlog of b.N readings kept
// for its persistent session into a durable store of its own: paho with
// the handler Consume had before Pipeline (Apply, then ack), and Consume.
// msgs/s of each, and their ratio.
//
//	.ci/brokers.sh -run '^$' -bench ConsumeFromBroker -benchtime 2000x -count 3 ./mqtt
func BenchmarkConsumeFromBroker(b *testing.B) {
	broker := os.Getenv("ONCEKV_MQTT_URL")
	if broker == "" {
		b.Skip("ONCEKV_MQTT_URL is not set: run .ci/brokers.sh")
	}
	run := fmt.Sprint(time.Now().UnixNano())
	ctx := context.Background()
	connect := func(opts *paho.ClientOptions) paho.Client {
		c := paho.NewClient(opts.AddBroker(broker))
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.Fatalf("connect: %v", tok.Error())
		}
		return c
	}
	// backlog makes the session id, subscribed to topic, and publishes n
	// readings while it is away.
	backlog := func(id, topic string, n int) {
		c := connect(paho.NewClientOptions().SetClientID(id).SetCleanSession(false))
		if tok := c.Subscribe(topic, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.Fatalf("subscribe: %v", tok.Error())
		}
		c.Disconnect(250)
		pub := connect(paho.NewClientOptions().SetClientID(id + "-pub"))
		defer pub.Disconnect(250)
		toks := make([]paho.Token, 0, n)
		for i := range n {
			r := reading.Reading{Key: fmt.Sprintf("%s-%08d", id, i), Value: float64(i)}
			toks = append(toks, pub.Publish(topic, 1, false, reading.Encode(r)))
		}
		for _, tok := range toks {
			if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
				b.Fatalf("publish: %v", tok.Error())
			}
		}
	}
	open := func(name string) *oncekv.DB {
		db, err := oncekv.Open(filepath.Join(b.TempDir(), name), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	seqID, pipeID := "oncekv-bench-seq-"+run, "oncekv-bench-pipe-"+run
	seqTopic, pipeTopic := "oncekv/bench/"+run+"/seq", "oncekv/bench/"+run+"/pipe"
	backlog(seqID, seqTopic, b.N)
	backlog(pipeID, pipeTopic, b.N)
	seqDB, pipeDB := open("seq.db"), open("pipe.db")

	b.ResetTimer()
	// Apply, then ack.
	acked := make(chan struct{}, b.N)
	handle := sequentialHandler(ctx, seqDB)
	start := time.Now()
	c := connect(paho.NewClientOptions().SetClientID(seqID).SetCleanSession(false).SetAutoAckDisabled(true).
		SetDefaultPublishHandler(func(c paho.Client, m paho.Message) {
			handle(c, &countedMessage{Message: m, acked: acked})
		}))
	for range b.N {
		<-acked
	}
	seq := time.Since(start)
	c.Disconnect(250)

	// Consume.
	cctx, cancel := context.WithCancel(ctx)
	var n atomic.Int64
	var pipe time.Duration
	start = time.Now()
	err := mqtt.Consume(cctx, pipeDB, mqtt.ConsumerOptions{
		Broker: broker, ClientID: pipeID, Topic: pipeTopic,
		OnResult: func(_ string, _ oncekv.Result, err error, acked bool) {
			if err == nil && acked && n.Add(1) == int64(b.N) {
				pipe = time.Since(start)
				cancel()
			}
		},
	})
	cancel()
	b.StopTimer()
	if pipe == 0 {
		// Once all were acked, an error is ctx's, cut short by cancel
		// (the backlog may drain before Subscribe returns).
		b.Fatalf("Consume acked %d of %d: %v", n.Load(), b.N, err)
	}

	seqRate, pipeRate := float64(b.N)/seq.Seconds(), float64(b.N)/pipe.Seconds()
	b.ReportMetric(seqRate, "seq-msgs/s")
	b.ReportMetric(pipeRate, "consume-msgs/s")
	b.ReportMetric(pipeRate/seqRate, "x-consume/seq")
}

// countedMessage is a paho.Message whose Ack also signals acked.
type countedMessage struct {
	paho.Message
	acked chan<- struct{}
}

func (m *countedMessage) Ack() {
	m.Message.Ack()
	m.acked <- struct{}{}
}
