package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/retry"
)

// fakeSleeper records Do's waits and moves the clock instead of sleeping.
type fakeSleeper struct {
	clock *fakeClock
	waits []time.Duration
}

func (s *fakeSleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.waits = append(s.waits, d)
	s.clock.Advance(d)
	return ctx.Err()
}

func newDoPolicy(clock *fakeClock, s *fakeSleeper, p retry.Policy) *retry.Policy {
	p.Now, p.Sleep = clock.Now, s.Sleep
	return &p
}

func TestDoRetriesUntilSuccess(t *testing.T) {
	clock := newFakeClock()
	s := &fakeSleeper{clock: clock}
	var attempts []int
	err := retry.Do(context.Background(), newDoPolicy(clock, s, retry.Policy{}), func(_ context.Context, attempt int) error {
		attempts = append(attempts, attempt)
		if attempt < 4 {
			return errTransient
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4}, attempts)
	require.Len(t, s.waits, 3)
	for i, w := range s.waits {
		require.GreaterOrEqual(t, w, time.Duration(0))
		require.Less(t, w, time.Second<<i, "wait %d", i)
	}
}

func TestDoHonoursRetryAfter(t *testing.T) {
	clock := newFakeClock()
	s := &fakeSleeper{clock: clock}
	var at []time.Time
	err := retry.Do(context.Background(), newDoPolicy(clock, s, retry.Policy{}), func(_ context.Context, attempt int) error {
		at = append(at, clock.Now())
		if attempt == 1 {
			return retry.After(7*time.Second, errTransient)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []time.Duration{7 * time.Second}, s.waits)
	require.Equal(t, 7*time.Second, at[1].Sub(at[0]), "the retry came no sooner than the server asked")
}

func TestDoGivesUp(t *testing.T) {
	clock := newFakeClock()
	errDeclined := &declined{code: 422}

	t.Run("permanent", func(t *testing.T) {
		s := &fakeSleeper{clock: clock}
		calls := 0
		err := retry.Do(context.Background(), newDoPolicy(clock, s, retry.Policy{}), func(context.Context, int) error {
			calls++
			return fmt.Errorf("charge: %w", retry.Permanent(errDeclined))
		})
		require.Equal(t, 1, calls)
		require.Empty(t, s.waits)
		var g *retry.GiveUpError
		require.ErrorAs(t, err, &g)
		require.Equal(t, retry.ReasonPermanent, g.Reason)
		require.Equal(t, 1, g.Attempts)
		require.ErrorIs(t, err, errDeclined)
		require.True(t, retry.IsPermanent(err))
		require.EqualError(t, err, "oncekv: gave up after 1 attempts (permanent): charge: declined 422")
	})

	t.Run("exhausted", func(t *testing.T) {
		s := &fakeSleeper{clock: clock}
		calls := 0
		err := retry.Do(context.Background(), newDoPolicy(clock, s, retry.Policy{MaxAttempts: 3}), func(context.Context, int) error {
			calls++
			return errTransient
		})
		require.Equal(t, 3, calls)
		require.Len(t, s.waits, 2)
		require.ErrorIs(t, err, retry.ErrExhausted)
		require.ErrorIs(t, err, errTransient)
		require.False(t, retry.IsPermanent(err))
	})

	t.Run("budget", func(t *testing.T) {
		s := &fakeSleeper{clock: clock}
		b := newBudget(t, clock, retry.BudgetOptions{MinPerSecond: -1})
		calls := 0
		err := retry.Do(context.Background(), newDoPolicy(clock, s, retry.Policy{Budget: b}), func(context.Context, int) error {
			calls++
			return errTransient
		})
		require.Equal(t, 1, calls, "one first attempt earns a tenth of a retry: none")
		require.ErrorIs(t, err, retry.ErrBudgetExhausted)
		require.ErrorIs(t, err, errTransient)
		st := b.Stats()
		require.Equal(t, uint64(1), st.Deposits, "Do recorded its first attempt")
		require.Equal(t, uint64(1), st.Refused)
	})

	t.Run("bad policy", func(t *testing.T) {
		err := retry.Do(context.Background(), &retry.Policy{Cap: -1}, func(context.Context, int) error {
			require.Fail(t, "fn must not run")
			return nil
		})
		require.ErrorIs(t, err, retry.ErrInvalidPolicy)
	})
}

func TestDoHonoursContext(t *testing.T) {
	clock := newFakeClock()

	t.Run("already done", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := retry.Do(ctx, nil, func(context.Context, int) error {
			require.Fail(t, "fn must not run")
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("canceled while waiting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s := &fakeSleeper{clock: clock}
		p := newDoPolicy(clock, s, retry.Policy{})
		p.Sleep = func(ctx context.Context, d time.Duration) error {
			cancel()
			return s.Sleep(ctx, d)
		}
		calls := 0
		err := retry.Do(ctx, p, func(context.Context, int) error { calls++; return errTransient })
		require.Equal(t, 1, calls)
		var g *retry.GiveUpError
		require.ErrorAs(t, err, &g)
		require.Equal(t, retry.ReasonCanceled, g.Reason)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, errTransient)
	})

	t.Run("a Sleep that ignores ctx", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		p := &retry.Policy{Now: clock.Now, Sleep: func(context.Context, time.Duration) error { cancel(); return nil }}
		calls := 0
		err := retry.Do(ctx, p, func(context.Context, int) error { calls++; return errTransient })
		require.Equal(t, 1, calls, "no attempt starts once ctx is done")
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("fn returns the caller's ctx error", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s := &fakeSleeper{clock: clock}
		err := retry.Do(ctx, newDoPolicy(clock, s, retry.Policy{}), func(ctx context.Context, _ int) error {
			cancel()
			return fmt.Errorf("send: %w", ctx.Err())
		})
		require.Empty(t, s.waits, "not retried")
		var g *retry.GiveUpError
		require.ErrorAs(t, err, &g)
		require.Equal(t, retry.ReasonCanceled, g.Reason)
		require.ErrorIs(t, err, context.Canceled)
	})

	// The default Sleep returns as soon as ctx is done, though the server
	// asked for an hour. (Were it to wait, go test's timeout would fail
	// this test.)
	t.Run("default sleep", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		err := retry.Do(ctx, nil, func(context.Context, int) error {
			cancel()
			return retry.After(time.Hour, errTransient)
		})
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, errTransient)
	})

	t.Run("deadline of the caller", func(t *testing.T) {
		ctx, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
		defer cancel()
		err := retry.Do(ctx, nil, func(context.Context, int) error { return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

// The attempt's own panic is the caller's: Do holds no lock, so nothing is
// left locked, and the Retrier stays usable.
func TestDoPanicIsTheCallers(t *testing.T) {
	r := newRetrier(t, 1, retry.Policy{})
	boom := errors.New("boom")
	require.PanicsWithValue(t, boom, func() {
		_ = r.Do(context.Background(), func(context.Context, int) error { panic(boom) })
	})
	require.NoError(t, r.Do(context.Background(), func(context.Context, int) error { return nil }))
}
