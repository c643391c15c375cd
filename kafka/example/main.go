// Command example consumes a Kafka topic into an oncekv store with the
// kafka package's Consumer, on any cluster:
//
//	go run ./example -brokers 127.0.0.1:9092 -topic payments -produce 1000
//
// With -produce N it first produces N records keyed "evt-0", ... in the
// Idempotency-Key header, every fourth one twice (a producer's retry
// without idempotence). It then consumes until interrupted (Ctrl-C),
// printing the consumer's counters every few seconds and at the end:
// start two of them in one group and stop one to see a rebalance; each key
// is applied once per store, the second copies counted as duplicates.
// Each process has its own store file (-db): two processes do not see each
// other's marks (see the package doc, "Where the guarantee ends").
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/kafka"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	topic := flag.String("topic", "payments", "topic to consume")
	group := flag.String("group", "billing", "consumer group")
	dbPath := flag.String("db", "billing.db", "oncekv store file")
	n := flag.Int("produce", 0, "records to produce first (every fourth twice)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, strings.Split(*brokers, ","), *topic, *group, *dbPath, *n); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// run produces n records (if n > 0), then consumes until ctx is done and
// returns the consumer's counters.
func run(ctx context.Context, brokers []string, topic, group, dbPath string, n int) (kafka.Stats, error) {
	if n > 0 {
		if err := produce(ctx, brokers, topic, n); err != nil {
			return kafka.Stats{}, err
		}
	}
	db, err := oncekv.Open(dbPath, nil)
	if err != nil {
		return kafka.Stats{}, err
	}
	defer db.Close()
	cl, err := kgo.NewClient(append(kafka.ConsumerOpts(group, topic), kgo.SeedBrokers(brokers...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RebalanceTimeout(30*time.Second))...)
	if err != nil {
		return kafka.Stats{}, err
	}
	defer cl.Close()
	cons, err := kafka.NewConsumer(db, cl, store, kafka.Options{
		Handler: "payment_captured",
		Key:     kafka.HeaderKey(kafka.DefaultKeyHeader),
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return kafka.Stats{}, err
	}
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fmt.Printf("%+v\n", cons.Stats())
			}
		}
	}()
	err = cons.Run(ctx)
	fmt.Printf("%+v\n", cons.Stats())
	return cons.Stats(), err
}

// store is the effect: the record's value under its key, committed with
// the key's dedup mark.
func store(tx *oncekv.Tx, r *kgo.Record) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists([]byte("payments"))
	if err != nil {
		return nil, err
	}
	return nil, b.Put([]byte(kafka.HeaderKey(kafka.DefaultKeyHeader)(r)), r.Value)
}

func produce(ctx context.Context, brokers []string, topic string, n int) error {
	cl, err := kgo.NewClient(append(kafka.ProducerOpts(), kgo.SeedBrokers(brokers...))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		key := fmt.Sprintf("evt-%d", i)
		r := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte("captured " + key),
			Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(key)}}}
		recs = append(recs, r)
		if i%4 == 0 {
			recs = append(recs, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers})
		}
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}
