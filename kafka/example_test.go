package kafka_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/kafka"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
)

// Example consumes a topic where one event arrives twice (a producer's
// retry): the second copy is suppressed, and the offsets are committed
// after the effects. kfake stands in for a cluster: pass your brokers'
// addresses to kgo.SeedBrokers instead.
func Example() {
	cluster, _ := kfake.NewCluster(kfake.SeedTopics(1, "payments"))
	defer cluster.Close()
	brokers := kgo.SeedBrokers(cluster.ListenAddrs()...)
	dir, _ := os.MkdirTemp("", "kafka-example")
	defer os.RemoveAll(dir)
	db, _ := oncekv.Open(filepath.Join(dir, "billing.db"), nil)
	defer db.Close()
	ctx, stop := context.WithCancel(context.Background())

	prod, _ := kgo.NewClient(append(kafka.ProducerOpts(), brokers)...)
	for _, key := range []string{"evt-1", "evt-1", "evt-2"} {
		prod.ProduceSync(ctx, &kgo.Record{Topic: "payments", Value: []byte("captured"),
			Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(key)}}})
	}
	prod.Close()

	cl, _ := kgo.NewClient(append(kafka.ConsumerOpts("billing", "payments"), brokers,
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	defer cl.Close()
	seen := 0
	cons, err := kafka.NewConsumer(db, cl, func(tx *oncekv.Tx, r *kgo.Record) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("payments"))
		if err != nil {
			return nil, err
		}
		return nil, b.Put(r.Headers[0].Value, r.Value) // commits with the dedup mark
	}, kafka.Options{
		Handler: "payment_captured",
		Key:     kafka.HeaderKey(kafka.DefaultKeyHeader),
		Logger:  slog.New(slog.DiscardHandler), // "duplicate suppressed" at info, with partition and offset
		OnBatch: func(outs []kafka.Outcome) {
			for _, o := range outs {
				fmt.Println(o.Key, "at offset", o.Record.Offset, o.Verdict)
			}
			if seen += len(outs); seen == 3 {
				stop()
			}
		},
	})
	if err != nil {
		panic(err)
	}
	_ = cons.Run(ctx)
	fmt.Printf("applied %d, duplicates %d\n", cons.Stats().Applied, cons.Stats().Duplicates)
	// Output:
	// evt-1 at offset 0 applied
	// evt-1 at offset 1 duplicate
	// evt-2 at offset 2 applied
	// applied 2, duplicates 1
}

// ExampleNewConsumer is docs/kafka.md's example, compiled but not run: a
// consumer of a real cluster, and the outbox of the same store relayed to
// it with the idempotent producer.
func ExampleNewConsumer() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db, err := oncekv.Open("billing.db", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	brokers := kgo.SeedBrokers("127.0.0.1:9092")

	cl, err := kgo.NewClient(append(kafka.ConsumerOpts("billing", "payments"), brokers,
		kgo.RebalanceTimeout(30*time.Second))...) // above the longest batch
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	cons, err := kafka.NewConsumer(db, cl, func(tx *oncekv.Tx, r *kgo.Record) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("payments"))
		if err != nil {
			return nil, err
		}
		return nil, b.Put(r.Key, r.Value) // in the mark's transaction
	}, kafka.Options{Handler: "payment_captured", Key: kafka.HeaderKey(kafka.DefaultKeyHeader)})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := cons.Run(ctx); err != nil { // offsets committed after each batch
			log.Print(err)
		}
	}()

	// The producer: an outbox in the same store, relayed with the
	// idempotent producer, the key as record key and header.
	outbox, err := queue.Open(db, "outbox", nil)
	if err != nil {
		log.Fatal(err)
	}
	prod, err := kgo.NewClient(append(kafka.ProducerOpts(), brokers)...)
	if err != nil {
		log.Fatal(err)
	}
	defer prod.Close()
	send, err := kafka.NewSender(prod, kafka.SenderOptions{Topic: "payments"})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx, outbox, send, nil); err != nil {
		log.Print(err)
	}
}
