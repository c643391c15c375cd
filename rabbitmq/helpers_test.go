package rabbitmq_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/applycount"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// brokerURL returns the broker CI started, or skips t.
func brokerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("ONCEKV_AMQP_URL")
	if u == "" {
		t.Skip("ONCEKV_AMQP_URL is not set: no RabbitMQ to test against; run .ci/amqp.sh, which installs and starts rabbitmq-server on 127.0.0.1")
	}
	return u
}

var names atomic.Uint64

// unique returns a queue or exchange name no other test of any run uses.
func unique(prefix string) string {
	return fmt.Sprintf("oncekv.test.%s.%d.%d", prefix, time.Now().UnixNano(), names.Add(1))
}

// openDB opens a store in t's temporary directory, closed and checked at
// cleanup.
func openDB(t testing.TB) *oncekv.DB { return oncetest.Open(t, nil) }

// channel opens a plain channel for the test's own declarations and
// inspections, closed at cleanup with its connection.
func channel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// deleteAfter deletes the queues and exchanges at cleanup, on a fresh
// connection (the test's may be gone with a broker restart).
func deleteAfter(t testing.TB, url string, queues []string, exchanges []string) {
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, e := range exchanges {
			_ = ch.ExchangeDelete(e, false, false)
		}
	})
}

// count is the test effect: it adds one to key's count, committed with
// its mark, so a count above 1 is a double application.
func count(tx *oncekv.Tx, key string) error { return applycount.Add(tx, key) }

// applied reads every key's count.
func applied(t testing.TB, db *oncekv.DB) map[string]uint64 { return oncetest.Applied(t, db) }

// publish publishes body with message id id to the default exchange's
// queue q, waiting for the broker's confirm.
func publish(t testing.TB, ch *amqp.Channel, q, id string, body []byte, headers amqp.Table) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, amqp.Publishing{
		MessageId: id, Body: body, Headers: headers, DeliveryMode: amqp.Persistent,
	})
	require.NoError(t, err)
	ok, err := dc.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "publish of %q not confirmed", id)
}
