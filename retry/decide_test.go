package retry_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/retry"
)

func TestDecideReasons(t *testing.T) {
	live := context.Background()
	canceled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithDeadline(live, time.Unix(0, 0))
	defer cancel2()

	cases := []struct {
		name    string
		ctx     context.Context
		attempt int
		cause   error
		want    retry.Reason
	}{
		{"success", live, 1, nil, retry.ReasonSucceeded},
		{"transient", live, 1, errTransient, retry.ReasonRetry},
		{"permanent", live, 1, retry.Permanent(errTransient), retry.ReasonPermanent},
		{"permanent beats exhausted", live, 10, retry.Permanent(errTransient), retry.ReasonPermanent},
		{"ninth attempt retries", live, 9, errTransient, retry.ReasonRetry},
		{"tenth attempt is the last", live, 10, errTransient, retry.ReasonExhausted},
		{"past the last", live, 11, errTransient, retry.ReasonExhausted},
		{"attempt 0 counts as 1", live, 0, errTransient, retry.ReasonRetry},
		{"negative attempt counts as 1", live, -3, errTransient, retry.ReasonRetry},
		{"caller canceled", canceled, 1, context.Canceled, retry.ReasonCanceled},
		{"caller canceled, wrapped", canceled, 1, fmt.Errorf("send: %w", context.Canceled), retry.ReasonCanceled},
		{"caller's deadline passed", expired, 1, context.DeadlineExceeded, retry.ReasonCanceled},
		{"canceled beats permanent", canceled, 1, retry.Permanent(context.Canceled), retry.ReasonCanceled},
		// A per-attempt timeout while the caller's ctx lives: transient.
		{"attempt timed out", live, 1, context.DeadlineExceeded, retry.ReasonRetry},
		{"canceled inside, caller live", live, 1, context.Canceled, retry.ReasonRetry},
		// The caller's ctx is done but the failure is something else: the
		// decision stays a retry (a queue persists it for later).
		{"caller done, server failed", canceled, 1, errTransient, retry.ReasonRetry},
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRetrier(t, 1, retry.Policy{})
			d := r.Decide(c.ctx, c.attempt, c.cause, now)
			require.Equal(t, c.want, d.Reason, d.Reason.String())
			require.Equal(t, c.want == retry.ReasonRetry, d.Retry())
			require.Equal(t, c.want == retry.ReasonPermanent || c.want == retry.ReasonExhausted, d.DeadLetter())
			require.Equal(t, now.Add(d.Delay), d.At)
			if c.want != retry.ReasonRetry {
				require.Zero(t, d.Delay)
			} else {
				require.Less(t, d.Delay, r.Ceiling(c.attempt))
			}
		})
	}
	// A nil ctx is no panic: it is never done.
	r := newRetrier(t, 1, retry.Policy{})
	//lint:ignore SA1012 a nil context on purpose: Decide and Do must treat it as never done
	require.Equal(t, retry.ReasonRetry, r.Decide(nil, 1, context.Canceled, now).Reason)
	//lint:ignore SA1012 a nil context on purpose: Decide and Do must treat it as never done
	require.NoError(t, r.Do(nil, func(context.Context, int) error { return nil }))

	require.False(t, retry.Decision{}.Retry(), "a zero Decision never retries")
	require.False(t, retry.Decision{}.DeadLetter())
}

func TestDecideUnlimitedAttempts(t *testing.T) {
	r := newRetrier(t, 1, retry.Policy{MaxAttempts: -1})
	now := time.Unix(0, 0)
	for _, attempt := range []int{10, 1000, math.MaxInt} { // MaxInt: 1<<40 is no int on 32-bit platforms
		d := r.Decide(context.Background(), attempt, errTransient, now)
		require.Equal(t, retry.ReasonRetry, d.Reason)
		require.Less(t, d.Delay, 5*time.Minute)
	}
}

// The delay is max(jitter, min(Retry-After, MaxRetryAfter)) on every seed.
func TestDecideRetryAfterFloorsTheDelay(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	for seed := uint64(1); seed <= 200; seed++ {
		r := newRetrier(t, seed, retry.Policy{})

		// A floor above the jitter's ceiling: exactly the floor.
		d := r.Decide(ctx, 1, retry.After(30*time.Second, errTransient), now)
		require.Equal(t, retry.ReasonRetry, d.Reason)
		require.Equal(t, 30*time.Second, d.Delay)
		require.Equal(t, now.Add(30*time.Second), d.At)

		// Longer than Cap but within MaxRetryAfter: honoured.
		d = r.Decide(ctx, 9, retry.After(40*time.Minute, errTransient), now)
		require.Equal(t, 40*time.Minute, d.Delay)

		// A huge one is capped at MaxRetryAfter.
		d = r.Decide(ctx, 1, retry.After(1000*time.Hour, errTransient), now)
		require.Equal(t, time.Hour, d.Delay)

		// A floor below the jitter: never below the floor, and jitter
		// still spreads above it.
		d = r.Decide(ctx, 9, retry.After(time.Second, errTransient), now)
		require.GreaterOrEqual(t, d.Delay, time.Second)
		require.Less(t, d.Delay, 256*time.Second)

		// A zero Retry-After (a date in the past) is no floor at all.
		d = r.Decide(ctx, 1, retry.After(0, errTransient), now)
		require.Less(t, d.Delay, time.Second)
	}

	// MaxRetryAfter is configurable.
	r := newRetrier(t, 1, retry.Policy{MaxRetryAfter: 10 * time.Second})
	d := r.Decide(ctx, 1, retry.After(time.Minute, errTransient), now)
	require.Equal(t, 10*time.Second, d.Delay)
}

func TestDecideSpendsTheBudget(t *testing.T) {
	clock := newFakeClock()
	b := newBudget(t, clock, retry.BudgetOptions{}) // floor: 10 per 10s
	r := newRetrier(t, 1, retry.Policy{Budget: b})
	ctx := context.Background()
	for i := range 10 {
		d := r.Decide(ctx, 1, errTransient, clock.Now())
		require.Equal(t, retry.ReasonRetry, d.Reason, "retry %d is within the floor", i)
	}
	d := r.Decide(ctx, 1, retry.After(3*time.Second, errTransient), clock.Now())
	require.Equal(t, retry.ReasonBudget, d.Reason)
	require.False(t, d.Retry())
	require.False(t, d.DeadLetter(), "a refused retry waits, it is not poison")
	require.Equal(t, 3*time.Second, d.Delay, "when to ask again")
	require.Equal(t, clock.Now().Add(3*time.Second), d.At)

	// Give-ups spend nothing.
	require.Equal(t, retry.ReasonPermanent, r.Decide(ctx, 1, retry.Permanent(errTransient), clock.Now()).Reason)
	require.Equal(t, retry.ReasonExhausted, r.Decide(ctx, 10, errTransient, clock.Now()).Reason)
	st := b.Stats()
	require.Equal(t, uint64(10), st.Withdrawals)
	require.Equal(t, uint64(1), st.Refused)
}

func TestReasonString(t *testing.T) {
	names := map[retry.Reason]string{
		retry.ReasonSucceeded: "succeeded",
		retry.ReasonRetry:     "retry",
		retry.ReasonPermanent: "permanent",
		retry.ReasonExhausted: "attempts exhausted",
		retry.ReasonBudget:    "budget exhausted",
		retry.ReasonCanceled:  "canceled",
		retry.Reason(42):      "reason(42)",
	}
	for r, name := range names {
		require.Equal(t, name, r.String())
	}
}
