package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/queue"
)

// TestWaitDrainedAndChanged is the sync badge: Changed fires at each
// commit that moves the queue (no polling: the test only waits on the
// channel), WaitOrderingKeyDrained returns once one note's edits are all
// acked, WaitDrained once the whole queue is.
func TestWaitDrainedAndChanged(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	changed := e.q.Changed()
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "a1", Body: []byte("x"), OrderingKey: "a"})
	require.NoError(t, err)
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("an enqueue did not fire Changed")
	}
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "b1", Body: []byte("x"), OrderingKey: "b"})
	require.NoError(t, err)

	keyDone, allDone := make(chan error, 1), make(chan error, 1)
	go func() { keyDone <- e.q.WaitOrderingKeyDrained(ctx, "a") }()
	go func() { allDone <- e.q.WaitDrained(ctx) }()
	ackKey := func(key string) {
		for {
			m := e.receiveNow(t)
			if m.Key == key {
				require.NoError(t, e.q.Ack(ctx, m))
				return
			}
			require.NoError(t, e.q.Defer(ctx, m, 0))
		}
	}
	ackKey("a1")
	require.NoError(t, <-keyDone)
	select {
	case err := <-allDone:
		t.Fatalf("WaitDrained returned with b1 in the queue: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	ackKey("b1")
	require.NoError(t, <-allDone)
	require.NoError(t, e.q.WaitDrained(ctx), "drained already: at once")

	// ctx and Close end a wait.
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "c1", Body: []byte("x")})
	require.NoError(t, err)
	short, stop := context.WithTimeout(ctx, 10*time.Millisecond)
	defer stop()
	require.ErrorIs(t, e.q.WaitDrained(short), context.DeadlineExceeded)
	go func() { allDone <- e.q.WaitDrained(ctx) }()
	require.NoError(t, e.q.Close())
	require.ErrorIs(t, <-allDone, queue.ErrQueueClosed)
	select {
	case <-e.q.Changed():
	default:
		t.Fatal("Changed of a closed queue is not closed")
	}
}

// A held key is not drained: its dead head stays in line.
func TestWaitOrderingKeyDrainedWaitsForAHeldKey(t *testing.T) {
	e := newEnv(t, nil)
	enqueueNote(t, e)
	id := deadLetterHead(t, e)
	short, stop := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer stop()
	require.ErrorIs(t, e.q.WaitOrderingKeyDrained(short, "note-7"), context.DeadlineExceeded)
	require.NoError(t, e.q.DeleteDead(context.Background(), id))
	drain(t, e)
	require.NoError(t, e.q.WaitOrderingKeyDrained(context.Background(), "note-7"))
}
