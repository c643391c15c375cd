package watermill_test

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// openDB opens a store in t's temporary directory, closed at cleanup.
func openDB(t testing.TB) *oncekv.DB {
	t.Helper()
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "store.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

var counts = []byte("applied")

// count adds one to key's count in tx: committed with the mark, so a count
// above 1 is a double application.
func count(tx *oncekv.Tx, key string) error {
	b, err := tx.CreateBucketIfNotExists(counts)
	if err != nil {
		return err
	}
	var n uint64
	if v := b.Get([]byte(key)); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return b.Put([]byte(key), binary.BigEndian.AppendUint64(nil, n+1))
}

// applied reads every key's count.
func applied(t testing.TB, db *oncekv.DB) map[string]uint64 {
	t.Helper()
	out := make(map[string]uint64)
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket(counts)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = binary.BigEndian.Uint64(v)
			return nil
		})
	}))
	return out
}

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
