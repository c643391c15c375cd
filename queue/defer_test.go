package queue_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// TestDeferDoesNotCountTheDelivery: a message given back unsent (a relay's
// budget refused its retry) waits its delay, keeps its attempt number and
// last error, and so is never dead-lettered by waiting.
func TestDeferDoesNotCountTheDelivery(t *testing.T) {
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxAttempts: 2, Base: time.Second, Cap: time.Second}})
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "k"})
	require.NoError(t, err)
	m := e.receiveNow(t)
	require.NoError(t, e.q.Nack(ctx, m, errors.New("503")))
	e.time.Advance(time.Second)
	for range 5 { // far more deferrals than MaxAttempts
		m = e.receiveNow(t)
		require.Equal(t, 2, m.Attempt)
		require.NoError(t, e.q.Defer(ctx, m, time.Minute))
		e.empty(t)
		e.time.Advance(time.Minute - time.Nanosecond)
		e.empty(t)
		e.time.Advance(time.Nanosecond)
	}
	m = e.receiveNow(t)
	require.Equal(t, 2, m.Attempt)
	require.Equal(t, "503", m.LastError)
	require.Zero(t, e.stats(t).Dead)
}

func TestDeferBadInputChangesNothing(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "k"})
	require.NoError(t, err)
	m := e.receiveNow(t)
	err = e.q.Defer(ctx, m, -time.Second)
	require.ErrorIs(t, err, queue.ErrInvalidDuration)
	require.ErrorContains(t, err, "oncekv: queue")
	require.ErrorIs(t, e.q.Defer(ctx, nil, 0), queue.ErrNoMessage)
	require.EqualValues(t, 1, e.stats(t).InFlight, "still leased")

	// Once the lease is taken over, the old delivery's Defer is fenced.
	e.time.Advance(queue.DefaultVisibility)
	m2 := e.receiveNow(t)
	require.ErrorIs(t, e.q.Defer(ctx, m, 0), oncekv.ErrFenced)
	require.NoError(t, e.q.Defer(ctx, m2, 0))
	require.Equal(t, 2, e.receiveNow(t).Attempt, "the lease that ran out counts, the deferred takeover does not")
}

func TestStatsOldestAge(t *testing.T) {
	e := newEnv(t, nil)
	require.Zero(t, e.stats(t).OldestAge)
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "a"})
	require.NoError(t, err)
	e.time.Advance(time.Minute)
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "b"})
	require.NoError(t, err)
	e.time.Advance(time.Second)
	require.Equal(t, time.Minute+time.Second, e.stats(t).OldestAge)
	m := e.receiveNow(t)
	require.Equal(t, "a", m.Key)
	require.NoError(t, e.q.Ack(ctx, m))
	require.Equal(t, time.Second, e.stats(t).OldestAge)
}
