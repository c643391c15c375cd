package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// TestEnqueueTxRefusalWritesNothingOnAFullDropOldestQueue: EnqueueTx's
// errors mean nothing was written, so a caller that commits its
// transaction anyway (its own writes matter more than the message) must
// find the queue as it was: no message dropped to make room for one that
// was then refused. Every check comes before the first write.
func TestEnqueueTxRefusalWritesNothingOnAFullDropOldestQueue(t *testing.T) {
	for name, m := range map[string]queue.Message{
		"ordering key over the key limit": {Key: "new", Body: []byte("b"), OrderingKey: string(make([]byte, 40_000))},
		"key over the key limit":          {Key: string(make([]byte, 40_000)), Body: []byte("b")},
		"negative delay":                  {Key: "new", Body: []byte("b"), Delay: -1},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, &queue.Options{MaxMessages: 1, WhenFull: queue.DropOldest})
			_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "old", Body: []byte("keep me")})
			require.NoError(t, err)
			var enqueueErr error
			require.NoError(t, e.db.Update(func(tx *oncekv.Tx) error {
				_, enqueueErr = e.q.EnqueueTx(tx, m)
				return nil // commit anyway
			}))
			require.Error(t, enqueueErr)
			var qe *queue.Error
			require.True(t, errors.As(enqueueErr, &qe))
			st := e.stats(t)
			require.Equal(t, uint64(1), st.Depth, "%+v", st)
			require.Zero(t, st.Dropped)
			got := e.receiveNow(t)
			require.Equal(t, "old", got.Key)
		})
	}
}

// TestOrderingKeyCountsInMaxBytes: what a queue holds of a message is its
// key, its ordering key and its body, and MaxBytes bounds all three.
func TestOrderingKeyCountsInMaxBytes(t *testing.T) {
	e := newEnv(t, &queue.Options{MaxBytes: 100})
	_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: []byte("b"), OrderingKey: string(make([]byte, 200))})
	require.ErrorIs(t, err, queue.ErrBodyTooLarge)
	_, err = e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: make([]byte, 40), OrderingKey: string(make([]byte, 40))})
	require.NoError(t, err)
	require.Equal(t, uint64(81), e.stats(t).Bytes)
	_, err = e.q.Enqueue(context.Background(), queue.Message{Key: "l", Body: []byte("b"), OrderingKey: string(make([]byte, 40))})
	require.ErrorIs(t, err, queue.ErrFull)
	require.NoError(t, e.q.Ack(context.Background(), e.receiveNow(t)))
	require.Zero(t, e.stats(t).Bytes)
}
