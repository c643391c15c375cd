package relay_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
)

// TestSlowSendIsNeverSentTwiceConcurrently: a send that takes three
// visibility timeouts keeps its lease by the relay's heartbeat, so the
// other worker never takes the message over and sends it again while the
// first send runs; the message is sent once and acked.
func TestSlowSendIsNeverSentTwiceConcurrently(t *testing.T) {
	e := newEnv(t, &queue.Options{Visibility: 30 * time.Second})
	e.enqueue(t, "slow")
	var (
		mu            sync.Mutex
		inFlight, max int
		calls         atomic.Int32
	)
	entered, release := make(chan struct{}, 4), make(chan struct{})
	send := func(ctx context.Context, m *queue.Message) error {
		calls.Add(1)
		mu.Lock()
		inFlight++
		max = maxInt(max, inFlight)
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		entered <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r := e.relay(t, send, &relay.Options{Workers: 2, SendTimeout: -1})
	run := start(r.Run)
	<-entered
	v, err := queue.NewView(e.db, "outbox")
	require.NoError(t, err)
	for step := range 9 { // 90s: three visibility timeouts, 10s at a time
		e.clock.Advance(10 * time.Second)
		now := e.clock.Now()
		// Wait (real time, for the workers' goroutines) until the beat of
		// this step has extended the lease, or the message was sent again.
		lease := time.Time{}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			ms, err := v.Messages(0, 1)
			require.NoError(t, err)
			if len(ms) == 1 {
				lease = ms[0].LeaseUntil
			}
			if calls.Load() > 1 || lease.Equal(now.Add(30*time.Second)) {
				break
			}
		}
		require.Equal(t, int32(1), calls.Load(), "sent again while the first send ran (step %d)", step)
		require.True(t, lease.After(now), "step %d: lease until %v, now %v", step, lease, now)
	}
	close(release)
	require.Eventually(t, func() bool { return r.Stats().Sent == 1 }, 20*time.Second, time.Millisecond)
	require.NoError(t, run.stop(t))
	require.Equal(t, 1, max)
	require.Equal(t, int32(1), calls.Load())
	require.Zero(t, e.stats(t).Depth)
	require.Positive(t, r.Stats().Extended)
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// TestNewRefusesASendTimeoutTheVisibilityCannotCover: without heartbeats
// a send must end before its lease does; with them, a heartbeat must
// come before the lease ends.
func TestNewRefusesASendTimeoutTheVisibilityCannotCover(t *testing.T) {
	e := newEnv(t, &queue.Options{Visibility: 5 * time.Second})
	send := func(context.Context, *queue.Message) error { return nil }
	for _, o := range []relay.Options{
		{Heartbeat: -1},                  // the default SendTimeout, 10s, outlives the lease
		{Heartbeat: -1, SendTimeout: -1}, // no bound at all
		{Heartbeat: -1, SendTimeout: 5 * time.Second},
		{Heartbeat: 5 * time.Second}, // the lease ends before the first beat
	} {
		_, err := relay.New(e.q, send, &o)
		require.ErrorIs(t, err, relay.ErrInvalidOptions, "%+v", o)
		require.ErrorContains(t, err, "Visibility")
	}
	for _, o := range []relay.Options{
		{}, // heartbeats every Visibility/3 cover the 10s
		{Heartbeat: -1, SendTimeout: 4 * time.Second},
		{Heartbeat: time.Second, SendTimeout: -1},
	} {
		_, err := relay.New(e.q, send, &o)
		require.NoError(t, err, "%+v", o)
	}
}
