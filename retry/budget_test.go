package retry_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/retry"
)

func TestNewBudgetReportsEveryBadField(t *testing.T) {
	b, err := retry.NewBudget(&retry.BudgetOptions{Window: time.Millisecond, Ratio: 2, MinPerSecond: math.Inf(1)})
	require.Nil(t, b)
	require.ErrorIs(t, err, retry.ErrInvalidBudget)
	for _, field := range []string{"Window = 1ms", "Ratio = 2", "MinPerSecond = +Inf"} {
		require.Contains(t, err.Error(), field)
	}
	for _, o := range []retry.BudgetOptions{
		{Ratio: math.NaN()},
		{Ratio: -0.1},
		{Window: -time.Second},
		{MinPerSecond: math.NaN()},
		{MinPerSecond: 1e12},
	} {
		_, err := retry.NewBudget(&o)
		require.ErrorIs(t, err, retry.ErrInvalidBudget, "%+v", o)
	}
	b, err = retry.NewBudget(nil)
	require.NoError(t, err)
	require.Equal(t, uint64(10), b.Stats().Available, "the default floor: 1/s over 10s")
}

// A full outage on a fake clock: 100 first attempts a second, every one
// failing, and every failure retried at once for as long as the budget
// allows (the most a caller could ask). In every 10-second window the far
// side sees at most first attempts × 1.1 + the floor's 10, and the budget is
// really spent (not merely refusing everything). When the far side comes
// back, retries stop and the budget refills.
func TestBudgetBoundsRequestsUnderOutageAndRecovers(t *testing.T) {
	const (
		tick      = 10 * time.Millisecond
		window    = 10 * time.Second
		perWindow = int(window / tick) // one first attempt per tick: 100/s
	)
	clock := newFakeClock()
	start := clock.Now()
	b := newBudget(t, clock, retry.BudgetOptions{}) // 10s, 10%, 1/s
	r := newRetrier(t, 1, retry.Policy{Budget: b, MaxAttempts: -1})
	ctx := context.Background()

	type counts struct{ firsts, requests, retries int }
	windows := map[int]*counts{}
	down := func(t time.Duration) bool { return t >= 20*time.Second && t < 80*time.Second }

	for elapsed := time.Duration(0); elapsed < 110*time.Second; elapsed += tick {
		clock.Advance(tick)
		now := clock.Now()
		w := int(now.Sub(start) / window)
		if windows[w] == nil {
			windows[w] = &counts{}
		}
		c := windows[w]
		b.Attempt()
		c.firsts++
		c.requests++
		for attempt := 1; down(now.Sub(start)); attempt++ {
			d := r.Decide(ctx, attempt, errTransient, now)
			if !d.Retry() {
				require.Equal(t, retry.ReasonBudget, d.Reason)
				break
			}
			c.requests++ // the retry, sent at once, fails again
			c.retries++
		}
	}

	for w := 2; w < 8; w++ { // the outage, 20s to 80s
		c := windows[w]
		require.Equal(t, perWindow, c.firsts)
		require.LessOrEqual(t, c.requests, c.firsts+c.firsts/10+10, "window %d", w)
		require.GreaterOrEqual(t, c.retries, c.firsts/10, "window %d: the budget is spent, not hoarded", w)
	}
	st := b.Stats()
	require.Equal(t, uint64(110*perWindow/10), st.Deposits)
	require.Greater(t, st.Refused, uint64(0))

	// Recovery: no retries, no refusals, and a full window of healthy
	// traffic refills the budget to 10% of it plus the floor.
	for w := 8; w < 11; w++ {
		require.Zero(t, windows[w].retries)
	}
	require.Equal(t, st.Refused, b.Stats().Refused)
	// At 110s the trailing window is the slots of 101s to 110s: 901 first
	// attempts.
	require.Equal(t, uint64(901/10+10), st.Available)
	require.Equal(t, uint64(60*perWindow/10*10/100+6*10), st.Withdrawals, "exactly 10% plus the floor, over the six windows")
}

// Deposits and withdrawals leave the window as it slides, a tenth at a
// time.
func TestBudgetWindowSlides(t *testing.T) {
	clock := newFakeClock()
	b := newBudget(t, clock, retry.BudgetOptions{})
	spend := func() int {
		n := 0
		for b.TryRetry() {
			n++
		}
		return n
	}
	for range 1000 {
		b.Attempt()
	}
	require.Equal(t, uint64(110), b.Stats().Available)
	require.Equal(t, 110, spend(), "10% of 1000, plus 10 of floor")
	clock.Advance(5 * time.Second)
	require.Zero(t, spend(), "still in the window")
	clock.Advance(5*time.Second - time.Nanosecond)
	require.Zero(t, spend(), "one nanosecond before the first slot leaves")
	clock.Advance(time.Nanosecond)
	require.Equal(t, 10, spend(), "the first slot left with its deposits and withdrawals: the floor only")
	clock.Advance(4 * time.Second)
	for range 100 {
		b.Attempt()
	}
	require.Equal(t, 10, spend(), "10 of the ratio; the floor was spent 4s ago and is still counted")
	clock.Advance(6 * time.Second)
	require.Equal(t, 10, spend(), "the floor's 10 slid out, the deposits and their 10 retries are still in")
	clock.Advance(10 * time.Second)
	require.Equal(t, 10, spend(), "everything slid out: the floor again")

	st := b.Stats()
	require.Equal(t, uint64(1100), st.Deposits)
	require.Equal(t, uint64(110+10+10+10+10), st.Withdrawals)
	require.Equal(t, uint64(7), st.Refused, "one per spend")
}

func TestBudgetRatioAndFloor(t *testing.T) {
	clock := newFakeClock()
	noFloor := newBudget(t, clock, retry.BudgetOptions{MinPerSecond: -1})
	require.False(t, noFloor.TryRetry(), "no first attempts, no floor: no retry")
	for range 9 {
		noFloor.Attempt()
	}
	require.False(t, noFloor.TryRetry(), "9 x 10% is less than one retry")
	noFloor.Attempt()
	require.True(t, noFloor.TryRetry(), "10 x 10% is exactly one")
	require.False(t, noFloor.TryRetry())

	half := newBudget(t, clock, retry.BudgetOptions{MinPerSecond: 0.5, Window: 4 * time.Second, Ratio: 0.25})
	require.Equal(t, uint64(2), half.Stats().Available, "0.5/s over 4s")
	for range 3 {
		half.Attempt()
	}
	require.Equal(t, uint64(2), half.Stats().Available, "0.75 of a retry rounds down")
	half.Attempt()
	require.Equal(t, uint64(3), half.Stats().Available)
}

// A clock that steps back neither drops what the window holds nor lets
// expired slots back in; slots skipped by a quiet spell are out too.
func TestBudgetClockSteppingBack(t *testing.T) {
	clock := newFakeClock()
	b := newBudget(t, clock, retry.BudgetOptions{})
	for range 1000 {
		b.Attempt()
	}
	// A quiet spell that skips slots: the first slot's ring entry is not
	// reused by 12s, yet it is out of the window.
	clock.Advance(12 * time.Second)
	require.Equal(t, uint64(10), b.Stats().Available, "the 1000 left the window")
	clock.Advance(-7 * time.Second)
	require.Equal(t, uint64(10), b.Stats().Available, "stepping back does not bring them back")
	clock.Advance(-5 * time.Second)

	b = newBudget(t, clock, retry.BudgetOptions{})
	clock.Advance(15 * time.Second)
	for range 100 {
		b.Attempt()
	}
	require.Equal(t, uint64(20), b.Stats().Available)
	clock.Advance(-12 * time.Second)
	require.Equal(t, uint64(20), b.Stats().Available, "the deposits made later are still counted")
	for range 100 {
		b.Attempt() // counted into the newest slot
	}
	require.Equal(t, uint64(30), b.Stats().Available)
	clock.Advance(-time.Hour)
	require.True(t, b.TryRetry())
	clock.Advance(time.Hour + 12*time.Second + 10*time.Second)
	require.Equal(t, uint64(10), b.Stats().Available, "the newest slot left the window once real time passed it")
}

func TestBudgetConcurrent(t *testing.T) {
	clock := newFakeClock()
	b := newBudget(t, clock, retry.BudgetOptions{})
	r := newRetrier(t, 1, retry.Policy{Budget: b, MaxAttempts: -1})
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				b.Attempt()
				if (g+i)%2 == 0 {
					b.TryRetry()
				} else {
					r.Decide(context.Background(), i+1, errTransient, clock.Now())
				}
				_ = b.Stats()
			}
		})
	}
	wg.Wait()
	st := b.Stats()
	require.Equal(t, uint64(goroutines*each), st.Deposits)
	require.Equal(t, uint64(goroutines*each), st.Withdrawals+st.Refused)
	require.LessOrEqual(t, st.Withdrawals, uint64(goroutines*each/10+10))
	require.Greater(t, st.Withdrawals, uint64(0))
	require.Equal(t, uint64(goroutines*each/10+10)-st.Withdrawals, st.Available)
}

func TestBudgetStatsSub(t *testing.T) {
	old := retry.BudgetStats{Deposits: 10, Withdrawals: 2, Refused: 1, Available: 5}
	now := retry.BudgetStats{Deposits: 25, Withdrawals: 4, Refused: 7, Available: 3}
	require.Equal(t, retry.BudgetStats{Deposits: 15, Withdrawals: 2, Refused: 6, Available: 3}, now.Sub(old))
}

// The budget's cost per first attempt and retry, alone and with every
// core contending for its lock.
func BenchmarkBudget(b *testing.B) {
	budget, err := retry.NewBudget(nil)
	require.NoError(b, err)
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			budget.Attempt()
			budget.TryRetry()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				budget.Attempt()
				budget.TryRetry()
			}
		})
	})
}
