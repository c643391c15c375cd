package watermill_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/applycount"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// openDB opens a store in t's temporary directory, closed and checked at
// cleanup.
func openDB(t testing.TB) *oncekv.DB { return oncetest.Open(t, nil) }

// count is the test effect: it adds one to key's count, committed with
// its mark, so a count above 1 is a double application.
func count(tx *oncekv.Tx, key string) error { return applycount.Add(tx, key) }

// applied reads every key's count.
func applied(t testing.TB, db *oncekv.DB) map[string]uint64 { return oncetest.Applied(t, db) }

// deleteQueues deletes the test's queues from the broker at url.
func deleteQueues(url string, queues ...string) {
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
}

// declareQueue declares a durable queue as watermill-amqp's queue config
// does.
func declareQueue(t *testing.T, url, q string) {
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(q, true, false, false, false, nil)
	require.NoError(t, err)
}
