package queue_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// A huge Delay must not wrap around to the past: the message stays
// invisible, or the enqueue is refused with a typed error.
func TestHugeDelayDoesNotWrapAround(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: []byte("b"), Delay: math.MaxInt64})
	if err != nil {
		require.ErrorIs(t, err, queue.ErrInvalidDuration)
		return
	}
	e.empty(t)
}

// A huge Extend must keep the lease, not end it.
func TestHugeExtendKeepsTheLease(t *testing.T) {
	e := newEnv(t, nil)
	m := e.leaseOne(t)
	err := e.q.Extend(context.Background(), m, math.MaxInt64)
	if err != nil {
		require.ErrorIs(t, err, queue.ErrInvalidDuration)
		return
	}
	require.True(t, m.LeaseUntil.After(e.time.Now()), "lease until %v", m.LeaseUntil)
	e.empty(t)
}

// A huge Defer must keep the message away, not make it visible at once.
func TestHugeDeferKeepsTheMessageAway(t *testing.T) {
	e := newEnv(t, nil)
	m := e.leaseOne(t)
	err := e.q.Defer(context.Background(), m, math.MaxInt64)
	if err != nil {
		require.ErrorIs(t, err, queue.ErrInvalidDuration)
		return
	}
	e.empty(t)
}

// A huge Visibility must not make a leased message visible at once.
func TestHugeVisibilityKeepsTheLease(t *testing.T) {
	e := newEnv(t, &queue.Options{Visibility: math.MaxInt64})
	m := e.leaseOne(t)
	require.True(t, m.LeaseUntil.After(e.time.Now()), "lease until %v", m.LeaseUntil)
	e.empty(t)
}

// A Retry-After beyond year 2262 (MaxRetryAfter lifted to "always honour")
// must park the message, not wrap its next visible time into the past.
func TestHugeRetryAfterDoesNotWrapAround(t *testing.T) {
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxRetryAfter: math.MaxInt64}})
	m := e.leaseOne(t)
	require.NoError(t, e.q.Nack(context.Background(), m, retry.After(math.MaxInt64, errors.New("busy"))))
	e.empty(t)
	require.EqualValues(t, 1, e.stats(t).Delayed)
}

// leaseOne enqueues message "k" and receives it.
func (e *env) leaseOne(t *testing.T) *queue.Message {
	t.Helper()
	_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	return e.receiveNow(t)
}
