package rabbitmq_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/rabbitmq"
	"github.com/oncekv/oncekv/relay"
)

// Example consumes the "payments" queue: each delivery's effect commits
// with its mark, then it is acked; a copy is acked without running the
// effect again; a permanent failure goes to "payments.dlx". The producer
// side sends an outbox through the relay with publisher confirms.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db, err := oncekv.Open("payments.db", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	url := "amqp://guest:guest@127.0.0.1:5672/"

	c, err := rabbitmq.NewConsumer(db, &rabbitmq.ConsumerOptions{
		URL: url, Queue: "payments", DeadLetterExchange: "payments.dlx",
		Handler: "payment_captured", // the dedup scope
	}, func(tx *oncekv.Tx, d *amqp.Delivery) error {
		b, err := tx.CreateBucketIfNotExists([]byte("paid"))
		if err != nil {
			return err
		}
		return b.Put([]byte(d.MessageId), d.Body) // in the mark's transaction
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := c.Run(ctx); err != nil {
			log.Print(err)
		}
	}()

	// The producer: an outbox in the same store, relayed with confirms.
	outbox, err := queue.Open(db, "outbox", nil)
	if err != nil {
		log.Fatal(err)
	}
	p, err := rabbitmq.NewPublisher(&rabbitmq.PublisherOptions{URL: url, RoutingKey: "payments"})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if _, err := outbox.Enqueue(ctx, queue.Message{Key: "order-42/capture", Body: []byte(`{"cents":1999}`)}); err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx, outbox, p.Send, nil); err != nil {
		log.Fatal(err)
	}
}
