package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

func TestProbeCloseWakesReceivers(t *testing.T) {
	e := newEnv(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.q.Receive(context.Background())
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, e.q.Close())
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, queue.ErrQueueClosed)
	}
}

func TestProbeCtxCancelWhileBlocked(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := e.q.Receive(ctx); done <- err }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

func TestProbeAckTwice(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	m := e.receiveNow(t)
	require.NoError(t, e.q.Ack(context.Background(), m))
	err = e.q.Ack(context.Background(), m)
	require.Error(t, err)
	err = e.q.Nack(context.Background(), m, nil)
	require.Error(t, err)
	t.Log(err)
	// after ack, enqueue same key -> duplicate, id same
	id, err := e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	require.Equal(t, m.ID, id)
	e.empty(t)
}

func TestProbeExtendAfterLeaseExpiredNotTaken(t *testing.T) {
	e := newEnv(t, &queue.Options{Visibility: time.Second})
	_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	m := e.receiveNow(t)
	e.time.Advance(2 * time.Second)
	require.NoError(t, e.q.Extend(context.Background(), m, time.Minute))
	e.empty(t)
	st := e.stats(t)
	t.Logf("%+v", st)
	require.EqualValues(t, 1, st.InFlight)
}

func TestProbeOrderingDeadLetterUnblocks(t *testing.T) {
	e := newEnv(t, &queue.Options{Visibility: time.Second})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		_, err := e.q.Enqueue(ctx, queue.Message{Key: k, Body: []byte(k), OrderingKey: "g"})
		require.NoError(t, err)
	}
	m := e.receiveNow(t)
	require.Equal(t, "a", m.Key)
	e.empty(t)
	require.NoError(t, e.q.Nack(ctx, m, queue.ErrFull)) // transient
	e.time.Advance(time.Hour)
	m = e.receiveNow(t)
	require.Equal(t, "a", m.Key)
	require.NoError(t, e.q.Ack(ctx, m))
	m = e.receiveNow(t)
	require.Equal(t, "b", m.Key)
	dl := e.stats(t)
	t.Logf("%+v", dl)
	id, err := e.q.Redrive(ctx, 12345)
	require.Error(t, err)
	_ = id
	// drop oldest with ordering
}

// Nack's doc: a cause that is ctx's own error while ctx is done releases
// the message at once, as it was.
func TestNackWithItsOwnCancelledContextReleasesTheMessage(t *testing.T) {
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxAttempts: 1}})
	_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	m := e.receiveNow(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, e.q.Nack(ctx, m, fmt.Errorf("send: %w", ctx.Err())))
	st := e.stats(t)
	require.EqualValues(t, 1, st.Ready, "released at once: %+v", st)
	require.Zero(t, st.Dead, "not dead-lettered, though it was the last attempt: %+v", st)
	m2 := e.receiveNow(t)
	require.Equal(t, m.Key, m2.Key)
	require.Empty(t, m2.LastError)

	// Another cause with a done ctx: ctx's error, nothing changed.
	err = e.q.Nack(ctx, m2, errors.New("boom"))
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 1, e.stats(t).InFlight)
}

type panicky struct{}

func (panicky) Error() string             { return "panicky" }
func (panicky) RetryAfter() time.Duration { panic("user panic") }

func TestProbeNackPanicInCauseIsCallers(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	m := e.receiveNow(t)
	require.PanicsWithValue(t, "user panic", func() { _ = e.q.Nack(context.Background(), m, panicky{}) })
	_, err = e.q.Enqueue(context.Background(), queue.Message{Key: "k2", Body: []byte("b")})
	require.NoError(t, err)
	require.NoError(t, e.q.Ack(context.Background(), m))
}

func TestOpenNilDBIsAnError(t *testing.T) {
	q, err := queue.Open(nil, "x", nil)
	require.ErrorIs(t, err, queue.ErrNilDB)
	require.Contains(t, err.Error(), `"x"`)
	require.Nil(t, q)
}
