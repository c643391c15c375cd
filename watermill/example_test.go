package watermill_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/watermill"
)

// Example runs a Router on Watermill's in-memory Pub/Sub with the
// middleware: a payment published twice (one UUID) is applied once; its
// receipt, returned by the handler, is published for both deliveries with
// one UUID, for the next consumer to deduplicate.
func Example() {
	dir, _ := os.MkdirTemp("", "oncekv-watermill")
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "billing.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	logger := wm.NopLogger{}
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	router, _ := message.NewRouter(message.RouterConfig{}, logger)
	poison, _ := middleware.PoisonQueueWithFilter(pubsub, "payments.poison", watermill.IsPoison)
	once, _ := watermill.Middleware(db, nil)
	router.AddMiddleware(poison, once) // poison first: it sees once's errors

	router.AddHandler("billing", "payments", pubsub, "receipts", pubsub,
		watermill.HandlerFunc(func(tx *oncekv.Tx, msg *message.Message) ([]*message.Message, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("paid"))
			if err != nil {
				return nil, err
			}
			if err := b.Put([]byte(msg.UUID), msg.Payload); err != nil { // commits with the mark
				return nil, err
			}
			return []*message.Message{message.NewMessage("receipt-"+msg.UUID, msg.Payload)}, nil
		}))
	receipts, _ := pubsub.Subscribe(context.Background(), "receipts")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	for range 2 { // the producer's retry: the same message, the same UUID
		_ = pubsub.Publish("payments", message.NewMessage("pay-42", []byte("19.99")))
	}
	for range 2 {
		r := <-receipts
		r.Ack()
		fmt.Println("receipt", r.UUID, string(r.Payload))
	}
	_ = db.View(func(tx *oncekv.Tx) error {
		return tx.Bucket([]byte("paid")).ForEach(func(k, v []byte) error {
			fmt.Println("paid", string(k), string(v))
			return nil
		})
	})
	// Output:
	// receipt receipt-pay-42 19.99
	// receipt receipt-pay-42 19.99
	// paid pay-42 19.99
}
