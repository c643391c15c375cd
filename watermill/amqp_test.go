package watermill_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/watermill"
)

// TestAMQPDuplicatesAppliedOnce is the middleware on watermill-amqp's
// Pub/Sub and a real RabbitMQ: 100 payments, each published twice under
// one UUID (the producer's retry), and one poison payment. The handler's
// effect is applied once per payment; the duplicates are acked without
// running it; the poison one is routed to the poison queue; and the
// router is closed and started again half-way, so what the first one
// left unacked is redelivered to the second and answered from the marks.
func TestAMQPDuplicatesAppliedOnce(t *testing.T) {
	url := os.Getenv("ONCEKV_AMQP_URL")
	if url == "" {
		t.Skip("ONCEKV_AMQP_URL is not set: no RabbitMQ to test against; run .ci/amqp.sh, which installs and starts rabbitmq-server on 127.0.0.1")
	}
	db := openDB(t)
	logger := wm.NopLogger{}
	topic := fmt.Sprintf("oncekv.test.watermill.%d", time.Now().UnixNano())
	cfg := wamqp.NewDurableQueueConfig(url)
	pub, err := wamqp.NewPublisher(cfg, logger)
	require.NoError(t, err)
	defer pub.Close()
	t.Cleanup(func() { deleteQueues(url, topic, topic+".poison") })
	// The poison queue exists before anything is poisoned: the queue
	// config's publisher declares nothing, and RabbitMQ drops what no
	// queue takes.
	declareQueue(t, url, topic+".poison")

	runs := 0
	start := func() (stop func()) {
		sub, err := wamqp.NewSubscriber(cfg, logger)
		require.NoError(t, err)
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		require.NoError(t, err)
		poison, err := middleware.PoisonQueueWithFilter(pub, topic+".poison", watermill.IsPoison)
		require.NoError(t, err)
		once, err := watermill.Middleware(db, nil)
		require.NoError(t, err)
		router.AddMiddleware(poison, once)
		router.AddConsumerHandler("ledger", topic, sub, func(msg *message.Message) error {
			tx := watermill.Tx(msg)
			if tx == nil {
				return watermill.ErrNoTx
			}
			runs++ // one handler, one message at a time: no lock needed
			if string(msg.Payload) == "poison" {
				return oncekv.Permanent(errors.New("unknown account"))
			}
			return count(tx, msg.UUID)
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- router.Run(ctx) }()
		<-router.Running()
		return func() {
			cancel()
			require.NoError(t, <-done)
			require.NoError(t, sub.Close())
		}
	}

	publishPair := func(i int) {
		id := fmt.Sprintf("pay-%03d", i)
		for range 2 {
			require.NoError(t, pub.Publish(topic, message.NewMessage(id, []byte(id))))
		}
	}
	stop := start()
	const n = 100
	for i := range n / 2 {
		publishPair(i)
	}
	require.NoError(t, pub.Publish(topic, message.NewMessage("pay-poison", []byte("poison"))))
	stop()
	stop = start()
	for i := n / 2; i < n; i++ {
		publishPair(i)
	}
	require.Eventually(t, func() bool { return len(applied(t, db)) == n }, 30*time.Second, 10*time.Millisecond)
	stop()
	for k, c := range applied(t, db) {
		require.Equal(t, uint64(1), c, "payment %s", k)
	}
	require.LessOrEqual(t, runs, n+1, "the handler ran for a duplicate")

	// The poison payment is on the poison queue, once.
	sub, err := wamqp.NewSubscriber(cfg, logger)
	require.NoError(t, err)
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	poisoned, err := sub.Subscribe(ctx, topic+".poison")
	require.NoError(t, err)
	select {
	case m := <-poisoned:
		require.Equal(t, "pay-poison", m.UUID)
		m.Ack()
	case <-ctx.Done():
		t.Fatal("the poison payment is not on the poison queue")
	}
	t.Logf("payments %d, each published twice, handler runs %d (duplicates suppressed %d)", n, runs, 2*n+1-runs)
}
