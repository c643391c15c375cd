package sqs_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	oncesqs "github.com/oncekv/oncekv/sqs"
)

// ExampleNewConsumer is docs/sqs.md's example, compiled but not run: a
// consumer of a real queue, and the outbox of the same store relayed to
// it. cfg comes from config.LoadDefaultConfig in a real program.
func ExampleNewConsumer() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db, err := oncekv.Open("orders.db", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	var cfg aws.Config // config.LoadDefaultConfig(ctx)
	client := sqs.NewFromConfig(cfg)
	queueURL := "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"

	cons, err := oncesqs.NewConsumer(db, client, func(tx *oncekv.Tx, m *types.Message) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return nil, err
		}
		return nil, b.Put([]byte(*m.MessageId), []byte(*m.Body)) // in the mark's transaction
	}, oncesqs.Options{
		Handler:  "order_placed",
		QueueURL: queueURL,
		Key:      oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), // not MessageID: new at each send
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := cons.Run(ctx); err != nil { // deleted after each batch committed
			log.Print(err)
		}
	}()

	// The producer: an outbox in the same store, relayed with the key in
	// an attribute (and as the deduplication id on a FIFO queue).
	outbox, err := queue.Open(db, "outbox", nil)
	if err != nil {
		log.Fatal(err)
	}
	send, err := oncesqs.NewSender(client, oncesqs.SenderOptions{QueueURL: queueURL})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx, outbox, send, nil); err != nil {
		log.Print(err)
	}
}

// Example consumes a queue, on goaws started in this process, where one
// order was sent twice (a producer's retry: two message ids, one key):
// the second copy is suppressed, and both are deleted.
func Example() {
	url, err := startServer() // goaws, an SQS-compatible server; a real client takes AWS's endpoint
	if err != nil {
		panic(err)
	}
	c := client(url)
	ctx, stop := context.WithCancel(context.Background())
	q, _ := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("example-orders")})
	for _, key := range []string{"order-1", "order-1"} {
		c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("2 apples"),
			MessageAttributes: map[string]types.MessageAttributeValue{
				oncesqs.DefaultKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)}}})
	}
	dir, _ := os.MkdirTemp("", "sqs-example")
	defer os.RemoveAll(dir)
	db, _ := oncekv.Open(filepath.Join(dir, "orders.db"), nil)
	defer db.Close()

	seen := 0
	cons, _ := oncesqs.NewConsumer(db, c, func(tx *oncekv.Tx, m *types.Message) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return nil, err
		}
		return nil, b.Put([]byte("order-1"), []byte(*m.Body))
	}, oncesqs.Options{
		Handler: "order_placed", QueueURL: *q.QueueUrl, Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute),
		WaitTime: time.Second, MaxMessages: 1, Logger: slog.New(slog.DiscardHandler),
		OnBatch: func(outs []oncesqs.Outcome) {
			for _, o := range outs {
				fmt.Println(o.Key, o.Verdict)
			}
			if seen += len(outs); seen == 2 {
				stop()
			}
		},
	})
	_ = cons.Run(ctx)
	s := cons.Stats()
	fmt.Printf("applied %d, duplicates %d, deleted %d\n", s.Applied, s.Duplicates, s.Deleted)
	// Output:
	// order-1 applied
	// order-1 duplicate
	// applied 1, duplicates 1, deleted 2
}
