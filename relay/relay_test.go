package relay_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

var errDown = errors.New("far side down")

func (e *env) relay(t *testing.T, send relay.Sender, o *relay.Options) *relay.Relay {
	t.Helper()
	var c relay.Options
	if o != nil {
		c = *o
	}
	c.Now = e.clock.Now
	c.Rand = rand.NewPCG(1, 2)
	r, err := relay.New(e.q, send, &c)
	require.NoError(t, err)
	return r
}

func TestNewRejectsBadInput(t *testing.T) {
	e := newEnv(t, nil)
	send := func(context.Context, *queue.Message) error { return nil }
	_, err := relay.New(nil, send, nil)
	require.ErrorIs(t, err, relay.ErrNilArgument)
	_, err = relay.New(e.q, nil, nil)
	require.ErrorIs(t, err, relay.ErrNilArgument)
	for _, w := range []int{-1, relay.MaxWorkers + 1} {
		_, err = relay.New(e.q, send, &relay.Options{Workers: w})
		require.ErrorIs(t, err, relay.ErrInvalidOptions)
		require.ErrorContains(t, err, "Workers")
		require.ErrorContains(t, err, "oncekv: ")
	}
}

func TestRelayDeliversEachMessageOnce(t *testing.T) {
	e := newEnv(t, nil)
	ks := keys(60)
	e.enqueue(t, ks...)
	rec := &recorder{clock: e.clock.Now}
	r := e.relay(t, rec.send, &relay.Options{Workers: 4})
	run := start(r.Run)
	require.Eventually(t, func() bool { return r.Stats().Sent == 60 }, 20*time.Second, time.Millisecond)
	require.NoError(t, run.stop(t))

	for _, k := range ks {
		require.Equal(t, 1, rec.count(k), k)
	}
	st := r.Stats()
	require.Zero(t, st.Retried+st.Failed+st.DeadLettered+st.BudgetExhausted, "%+v", st)
	require.EqualValues(t, 60, st.Budget.Deposits)
	require.Zero(t, e.stats(t).Depth)
}

func TestRelayRetriesNotBeforeRetryAfter(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "k")
	rec := &recorder{clock: e.clock.Now, reply: func(_ *queue.Message, n int) error {
		if n == 0 {
			return retry.After(30*time.Second, errDown)
		}
		return nil
	}}
	r := e.relay(t, rec.send, nil)
	run := start(r.Run)
	defer run.stop(t)
	require.Eventually(t, func() bool { return r.Stats().Failed == 1 }, 20*time.Second, time.Millisecond)
	e.quiet(t)
	require.GreaterOrEqual(t, r.Stats().Backoff, 30*time.Second)

	e.clock.Advance(30*time.Second - time.Nanosecond)
	e.quiet(t)
	require.Len(t, rec.log(), 1, "retried before the Retry-After")

	e.clock.Advance(time.Nanosecond)
	require.Eventually(t, func() bool { return r.Stats().Sent == 1 }, 20*time.Second, time.Millisecond)
	calls := rec.log()
	require.Len(t, calls, 2)
	require.Equal(t, calls[0].key, calls[1].key, "the key is stable across retries")
	require.Greater(t, calls[1].token, calls[0].token, "every delivery has a new token")
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), 30*time.Second)
	st := r.Stats()
	require.EqualValues(t, 1, st.Retried)
	require.Zero(t, st.Backoff, "a success resets the backoff gauge")
}

func TestRelayDeadLettersPermanentErrorAndRedriveKeepsKey(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "ok", "poison")
	rec := &recorder{clock: e.clock.Now, reply: func(m *queue.Message, n int) error {
		if m.Key == "poison" && n == 0 {
			return oncekv.Permanent(errors.New("422: bad reading"))
		}
		return nil
	}}
	r := e.relay(t, rec.send, nil)
	run := start(r.Run)
	defer run.stop(t)
	require.Eventually(t, func() bool { return r.Stats().DeadLettered == 1 && r.Stats().Sent == 1 }, 20*time.Second, time.Millisecond)

	dead, err := e.q.DeadLetters(0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "poison", dead[0].Key)
	require.Contains(t, dead[0].LastError, "bad reading")

	_, err = e.q.Redrive(context.Background(), dead[0].ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.Stats().Sent == 2 }, 20*time.Second, time.Millisecond)
	require.Equal(t, 2, rec.count("poison"), "the redrive is sent with the same key")
	require.Zero(t, e.stats(t).Depth+e.stats(t).Dead)
}

func TestRelayDeadLettersAfterMaxAttempts(t *testing.T) {
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxAttempts: 3, Base: time.Second, Cap: time.Second}})
	e.enqueue(t, "k")
	rec := &recorder{clock: e.clock.Now, reply: func(*queue.Message, int) error { return errDown }}
	r := e.relay(t, rec.send, nil)
	run := start(r.Run)
	defer run.stop(t)
	for range 3 {
		e.quiet(t)
		e.clock.Advance(time.Second)
	}
	require.Eventually(t, func() bool { return r.Stats().DeadLettered == 1 }, 20*time.Second, time.Millisecond)
	require.Equal(t, 3, rec.count("k"))
	require.EqualValues(t, 1, e.stats(t).Dead)
	require.EqualValues(t, 3, r.Stats().Failed)
}

// TestRelayBudgetHoldsOutageLoad: under a full outage the far side sees
// the first attempts plus at most the budget's share, in every aligned
// window; refused retries wait without being counted as attempts, so
// nothing is dead-lettered; and after the outage every message is
// delivered.
func TestRelayBudgetHoldsOutageLoad(t *testing.T) {
	const (
		n      = 100
		window = 10 * time.Second
		ratio  = 0.1
		floor  = 1.0
	)
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxAttempts: 6, Base: time.Second, Cap: 4 * time.Second}})
	budget, err := retry.NewBudget(&retry.BudgetOptions{Window: window, Ratio: ratio, MinPerSecond: floor, Now: e.clock.Now})
	require.NoError(t, err)
	down := true
	rec := &recorder{clock: e.clock.Now}
	rec.reply = func(*queue.Message, int) error {
		if down {
			return retry.After(time.Second, errDown)
		}
		return nil
	}
	e.enqueue(t, keys(n)...)
	r := e.relay(t, rec.send, &relay.Options{Workers: 4, Budget: budget})
	run := start(r.Run)
	defer run.stop(t)

	const outage = 40 * time.Second
	for e.clock.Now().Sub(t0) < outage {
		e.quiet(t)
		e.clock.Advance(500 * time.Millisecond)
	}
	e.quiet(t)
	rec.mu.Lock()
	down = false
	rec.mu.Unlock()

	perWindow := map[int64]int{}
	for _, c := range rec.log() {
		perWindow[int64(c.at.Sub(t0)/window)]++
	}
	allowed := int(n*(1+ratio) + floor*window.Seconds())
	for w, got := range perWindow {
		require.LessOrEqual(t, got, allowed, "window %d", w)
	}
	calls := len(rec.log())
	st := r.Stats()
	t.Logf("outage of %v: %d messages, %d requests (%d retries), %d retries refused by the budget",
		outage, n, calls, st.Retried, st.BudgetExhausted)
	require.LessOrEqual(t, calls, int(n*(1+ratio)+floor*(outage+window).Seconds()))
	require.NotZero(t, st.BudgetExhausted)
	require.Zero(t, st.DeadLettered, "waiting for the budget counts no attempt")

	// Recovery: everything is delivered, each key acked once.
	for r.Stats().Sent < n {
		e.quiet(t)
		e.clock.Advance(time.Second)
	}
	require.Zero(t, e.stats(t).Depth)
	require.Zero(t, e.stats(t).Dead)
}

func TestRelayStopLetsInFlightSendFinish(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "k")
	b := newBlocker()
	r := e.relay(t, b.send, &relay.Options{Grace: time.Minute})
	run := start(r.Run)
	<-b.entered
	run.cancel()
	close(b.release)
	require.NoError(t, run.stop(t))
	require.EqualValues(t, 1, r.Stats().Sent)
	require.Zero(t, e.stats(t).Depth)
}

func TestRelayStopCancelsSendAfterGraceAndResumesAfterReopen(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "a", "b")
	entered := make(chan struct{}, 2)
	send := func(ctx context.Context, m *queue.Message) error {
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	r := e.relay(t, send, &relay.Options{Grace: -1, Workers: 2})
	run := start(r.Run)
	<-entered
	<-entered
	require.NoError(t, run.stop(t))
	st := r.Stats()
	require.EqualValues(t, 2, st.Failed, "%+v", st)
	require.EqualValues(t, 2, e.stats(t).Depth, "nothing lost")

	e.close(t)
	e.open(t)
	rec := &recorder{clock: e.clock.Now}
	r2 := e.relay(t, rec.send, nil)
	run = start(r2.Run)
	e.clock.Advance(retry.DefaultBase) // past the interrupted attempts' backoff
	require.Eventually(t, func() bool { return r2.Stats().Sent == 2 }, 20*time.Second, time.Millisecond)
	require.NoError(t, run.stop(t))
	require.Equal(t, 1, rec.count("a"))
	require.Equal(t, 1, rec.count("b"))
	require.Zero(t, e.stats(t).Depth)
}

func TestRelayPanicInSendIsRunsPanic(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "k")
	r := e.relay(t, func(context.Context, *queue.Message) error { panic("boom") }, &relay.Options{Workers: 3})
	require.PanicsWithValue(t, "boom", func() { _ = r.Run(context.Background()) })
	require.EqualValues(t, 1, e.stats(t).Depth, "the message stays, leased until its lease ends")
}

func TestRelayGoexitInSendEndsRunsGoroutine(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "k")
	r := e.relay(t, func(context.Context, *queue.Message) error { runtime.Goexit(); return nil }, nil)
	returned, done := false, make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(context.Background())
		returned = true
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		require.FailNow(t, "Run did not end")
	}
	require.False(t, returned, "Run returned as if nothing happened")
	// The relay can run again: the Goexit released its running flag.
	run := start(r.Run)
	require.NoError(t, run.stop(t))
}

func TestRelayRunTwiceIsAnError(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "k")
	b := newBlocker()
	r := e.relay(t, b.send, nil)
	run := start(r.Run)
	<-b.entered
	require.ErrorIs(t, r.Run(context.Background()), relay.ErrRunning)
	close(b.release)
	require.NoError(t, run.stop(t))
}

func TestRelayStatsAgesAndSub(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "k")
	b := newBlocker()
	r := e.relay(t, b.send, nil)
	before := r.Stats()
	run := start(r.Run)
	<-b.entered
	e.clock.Advance(5 * time.Second)
	held := r.Stats()
	require.Equal(t, 5*time.Second, held.OldestPendingAge)
	require.Equal(t, 1, held.Holding, "the worker holds the message while it sends")
	require.Zero(t, held.Sent)
	close(b.release)
	// Holding drops only once the ack committed and was counted.
	require.Eventually(t, func() bool { return r.Stats().Holding == 0 }, 20*time.Second, time.Millisecond)
	require.EqualValues(t, 1, r.Stats().Sent)
	require.NoError(t, run.stop(t))
	d := r.Stats().Sub(before)
	require.EqualValues(t, 1, d.Sent)
	require.EqualValues(t, 1, d.Budget.Deposits)
	require.Zero(t, d.OldestPendingAge)
	require.Zero(t, d.Holding)
}

func TestRelayReturnsQueueClosed(t *testing.T) {
	e := newEnv(t, nil)
	r := e.relay(t, func(context.Context, *queue.Message) error { return nil }, nil)
	run := start(r.Run)
	q2, err := queue.Open(e.db, "outbox", &e.qopts) // a second reference
	require.NoError(t, err)
	require.NoError(t, q2.Close())
	require.NoError(t, e.q.Close())
	select {
	case err := <-run.done:
		require.ErrorIs(t, err, queue.ErrQueueClosed)
	case <-time.After(20 * time.Second):
		require.FailNow(t, "Run did not return once the queue closed")
	}
	run.cancel()
	q, err := queue.Open(e.db, "outbox", &e.qopts)
	require.NoError(t, err)
	e.q = q
}
