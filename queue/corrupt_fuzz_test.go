package queue_test

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// FuzzQueueDamagedRecords writes arbitrary bytes where the queue keeps a
// message, its index entry, a dead letter and its counters, and checks
// that every read and write of the queue returns (an error or an answer)
// without panicking.
func FuzzQueueDamagedRecords(f *testing.F) {
	f.Add([]byte{0x85}, []byte{1, 2}, []byte{0})
	f.Add([]byte("not msgpack"), make([]byte, 16), []byte{1})
	f.Add([]byte{0x8b, 0xa1, 0x76, 0x02}, make([]byte, 15), make([]byte, 9))
	f.Fuzz(func(t *testing.T, record, indexKey, counter []byte) {
		path := filepath.Join(t.TempDir(), "f.db")
		db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, ExpireInterval: -1})
		require.NoError(t, err)
		defer db.Close()
		q, err := queue.Open(db, "jobs", nil)
		require.NoError(t, err)
		defer q.Close()
		ctx := context.Background()
		_, err = q.Enqueue(ctx, queue.Message{Key: "k", Body: []byte("b")})
		require.NoError(t, err)
		id1 := binary.BigEndian.AppendUint64(nil, 1)
		require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
			put := func(bucket string, k, v []byte) {
				if len(k) > 0 {
					require.NoError(t, tx.Bucket([]byte("oncekv.queue.jobs."+bucket)).Put(k, v))
				}
			}
			put("m", id1, record)
			put("d", id1, record)
			put("v", indexKey, []byte{1})
			put("l", indexKey, nil)
			put("g", indexKey, nil)
			put("s", []byte("count"), counter)
			return nil
		}))
		m := &queue.Message{ID: 1, Key: "k", Token: 1}
		_, _ = q.Poll(ctx, 2)
		_, _ = q.Stats()
		_, _ = q.DeadLetters(0, 10)
		_, _ = q.DeadLetter(1)
		_, _ = q.Messages(0, 10)
		_, _ = q.View().OrderingKeys("", 10)
		_ = q.View().Check(func(error) error { return nil })
		_ = q.Ack(ctx, m)
		_ = q.Nack(ctx, m, nil)
		_ = q.Extend(ctx, m, 1)
		_, _ = q.Redrive(ctx, 1)
		_ = q.DeleteDead(ctx, 1)
		_, _ = q.Enqueue(ctx, queue.Message{Key: "k2", Body: []byte("b")})
	})
}
