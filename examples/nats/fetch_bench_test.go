package nats_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/examples/nats"
	"github.com/oncekv/oncekv/retry"
)

// BenchmarkConsumeOverlapsFetch drains, in one run, two backlogs of b.N
// readings from a real nats-server, each into a durable store of its own
// (an fsync per commit), in batches of 100: first as Consume did before it overlapped
// the steps (Fetch, then Handle: one ApplyBatch, then the acks; the time
// of each step is reported), then with Consume, which fetches the next
// batch while Handle commits one. msgs/s of each, and their ratio;
// "x-overlap-bound", (fetch+handle)/max(fetch, handle), is the most an
// overlap can gain.
//
//	.ci/brokers.sh -run '^$' -bench ConsumeOverlapsFetch -benchtime 5000x -count 3 ./nats
func BenchmarkConsumeOverlapsFetch(b *testing.B) {
	url := os.Getenv("ONCEKV_NATS_URL")
	if url == "" {
		b.Skip("ONCEKV_NATS_URL is not set: run .ci/brokers.sh")
	}
	ctx := context.Background()
	nc, err := natsgo.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	backlog := func(name string, n int) {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"oncekv.bench." + name}, Storage: jetstream.MemoryStorage}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
		for i := range n {
			r := reading.Reading{Key: fmt.Sprintf("%s-%08d", name, i), Value: float64(i)}
			if _, err := js.PublishAsync("oncekv.bench."+name, reading.Encode(r)); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
	}
	run := time.Now().UnixNano()
	seqStream, overStream := fmt.Sprintf("ONCEKV_BENCH_SEQ_%d", run), fmt.Sprintf("ONCEKV_BENCH_OVER_%d", run)
	backlog(seqStream, b.N)
	backlog(overStream, b.N)
	// A store for each, so that neither drains into a fuller file.
	open := func(name string) *oncekv.DB {
		db, err := oncekv.Open(filepath.Join(b.TempDir(), name), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	seqDB, overDB := open("seq.db"), open("consume.db")
	r, err := retry.New(nil)
	if err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	// Fetch, then Handle.
	cons, err := js.CreateOrUpdateConsumer(ctx, seqStream, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		b.Fatal(err)
	}
	var fetching, handling time.Duration
	for got := 0; got < b.N; {
		t0 := time.Now()
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		t1 := time.Now()
		if err := nats.Handle(ctx, seqDB, r, "nats-readings", msgs, nil); err != nil {
			b.Fatal(err)
		}
		fetching += t1.Sub(t0)
		handling += time.Since(t1)
		got += len(msgs)
	}
	seq := fetching + handling

	// Consume: the next Fetch while Handle commits.
	cctx, cancel := context.WithCancel(ctx)
	var acked atomic.Int64
	t0 := time.Now()
	var over time.Duration
	err = nats.Consume(cctx, overDB, js, nats.ConsumerOptions{
		Stream: overStream, Durable: "bench", Batch: 100,
		OnVerdict: func(_ string, v nats.Verdict, _ oncekv.Result, _ error) {
			if v.Action == nats.Ack && acked.Add(1) == int64(b.N) {
				over = time.Since(t0)
				cancel()
			}
		},
	})
	cancel()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if over == 0 {
		b.Fatalf("Consume acked %d of %d", acked.Load(), b.N)
	}

	b.ReportMetric(float64(fetching.Microseconds())/float64(b.N)*100, "fetch-µs/100msgs")
	b.ReportMetric(float64(handling.Microseconds())/float64(b.N)*100, "handle-µs/100msgs")
	b.ReportMetric(float64(seq)/float64(max(fetching, handling)), "x-overlap-bound")
	seqRate, overRate := float64(b.N)/seq.Seconds(), float64(b.N)/over.Seconds()
	b.ReportMetric(seqRate, "seq-msgs/s")
	b.ReportMetric(overRate, "consume-msgs/s")
	b.ReportMetric(overRate/seqRate, "x-consume/seq")
}
