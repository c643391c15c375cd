package sqs_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
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

// ExampleNewConsumer is the one-screen example of docs/sqs.md, compiled
// but not run: a consumer and an outbox relay on a real queue. client is
// sqs.NewFromConfig(cfg), cfg from config.LoadDefaultConfig.
func ExampleNewConsumer() {
	consume := func(ctx context.Context, client *sqs.Client, db *oncekv.DB, outbox *queue.Queue, queueURL string) error {
		cons, err := oncesqs.NewConsumer(db, client, func(tx *oncekv.Tx, m *types.Message) ([]byte, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return nil, err
			}
			return nil, b.Put([]byte(*m.MessageId), []byte(*m.Body)) // commits with the dedup mark
		}, oncesqs.Options{
			Handler:  "order_placed",
			QueueURL: queueURL,
			Key:      oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), // not MessageID: a new one per send
		})
		if err != nil {
			return err
		}

		// The outbox side: the key in an attribute, and as the
		// MessageDeduplicationId on a FIFO queue.
		send, _ := oncesqs.NewSender(client, oncesqs.SenderOptions{QueueURL: queueURL})
		go relay.Run(ctx, outbox, send, nil)

		return cons.Run(ctx) // until ctx is done
	}
	_ = consume
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
