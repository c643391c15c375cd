package retry_test

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/retry"
)

func TestNewFillsDefaults(t *testing.T) {
	r, err := retry.New(nil)
	require.NoError(t, err)
	p := r.Policy()
	require.Equal(t, time.Second, p.Base)
	require.Equal(t, 5*time.Minute, p.Cap)
	require.Equal(t, 10, p.MaxAttempts)
	require.Equal(t, time.Hour, p.MaxRetryAfter)
	require.NotNil(t, p.Now)
	require.NotNil(t, p.Sleep)
}

func TestNewReportsEveryBadFieldAndKeepsTheCallersPolicy(t *testing.T) {
	p := &retry.Policy{Base: -time.Second, Cap: -time.Minute, MaxRetryAfter: -1}
	r, err := retry.New(p)
	require.Nil(t, r)
	require.ErrorIs(t, err, retry.ErrInvalidPolicy)
	for _, field := range []string{"Base = -1s", "Cap = -1m0s", "MaxRetryAfter = -1ns"} {
		require.Contains(t, err.Error(), field)
	}
	require.Contains(t, err.Error(), "oncekv: ")
	require.Equal(t, retry.Policy{Base: -time.Second, Cap: -time.Minute, MaxRetryAfter: -1}, *p)

	// Base above Cap, where Cap comes from the default.
	_, err = retry.New(&retry.Policy{Base: time.Hour})
	require.ErrorIs(t, err, retry.ErrInvalidPolicy)
	require.ErrorContains(t, err, "Base = 1h0m0s: must not exceed Cap (5m0s)")

	// A valid policy leaves the caller's struct as it was too.
	p = &retry.Policy{Base: time.Millisecond}
	_, err = retry.New(p)
	require.NoError(t, err)
	require.Equal(t, retry.Policy{Base: time.Millisecond}, *p)
}

func TestCeilingDoublesFromBaseUpToCap(t *testing.T) {
	r, err := retry.New(nil)
	require.NoError(t, err)
	want, sum := time.Second, time.Duration(0)
	for attempt := 1; attempt <= 9; attempt++ {
		require.Equal(t, want, r.Ceiling(attempt), "attempt %d", attempt)
		sum += want
		want *= 2
	}
	// The package doc's arithmetic: the nine retries' ceilings add up to
	// 511s, so a poison message waits about 4 minutes on average in all.
	require.Equal(t, 511*time.Second, sum)
	require.Equal(t, 5*time.Minute, r.Ceiling(10), "512s is capped")
	// Below 1 counts as the first attempt.
	require.Equal(t, time.Second, r.Ceiling(0))
	require.Equal(t, time.Second, r.Ceiling(-7))
}

func TestBackoffDoesNotOverflowForHugeAttempts(t *testing.T) {
	policies := []retry.Policy{
		{},
		{Base: 1, Cap: math.MaxInt64},
		{Base: time.Hour, Cap: math.MaxInt64},
		{Base: math.MaxInt64, Cap: math.MaxInt64},
	}
	for _, p := range policies {
		r := newRetrier(t, 1, p)
		for _, attempt := range []int{64, 65, 1000, math.MaxInt32, math.MaxInt} {
			c := r.Ceiling(attempt)
			require.Equal(t, r.Policy().Cap, c, "policy %+v attempt %d", p, attempt)
			for range 100 {
				d := r.Backoff(attempt)
				require.GreaterOrEqual(t, d, time.Duration(0))
				require.Less(t, d, c)
			}
		}
	}
	// Just below the overflow the doubling is still exact.
	r := newRetrier(t, 1, retry.Policy{Base: 1, Cap: math.MaxInt64})
	require.Equal(t, time.Duration(1<<62), r.Ceiling(63))
}

// Every delay lies in [0, ceiling), and over many seeds the draws are
// uniform: mean near half the ceiling and each quarter of the range hit
// about a quarter of the time (equal jitter or no jitter would fail both).
func TestBackoffIsFullJitter(t *testing.T) {
	const draws = 4000
	for seed := uint64(1); seed <= 20; seed++ {
		r := newRetrier(t, seed, retry.Policy{Base: 100 * time.Millisecond, Cap: time.Minute})
		for attempt := 1; attempt <= 12; attempt++ {
			c := r.Ceiling(attempt)
			require.Equal(t, min(time.Minute, 100*time.Millisecond<<(attempt-1)), c)
			var sum float64
			var quarters [4]int
			lo, hi := c, time.Duration(-1)
			for range draws {
				d := r.Backoff(attempt)
				lo, hi = min(lo, d), max(hi, d)
				sum += float64(d)
				if d >= 0 && d < c {
					quarters[4*d/c]++
				}
			}
			require.GreaterOrEqual(t, lo, time.Duration(0))
			require.Less(t, hi, c)
			mean := sum / draws / float64(c)
			require.InDelta(t, 0.5, mean, 0.02, "seed %d attempt %d", seed, attempt)
			for q, n := range quarters {
				require.InDelta(t, 0.25, float64(n)/draws, 0.03, "seed %d attempt %d quarter %d", seed, attempt, q)
			}
		}
	}
}

func TestBackoffIsReproducibleFromTheSeed(t *testing.T) {
	a := newRetrier(t, 42, retry.Policy{})
	b := newRetrier(t, 42, retry.Policy{})
	c := newRetrier(t, 43, retry.Policy{})
	same, differ := true, false
	for attempt := 1; attempt <= 50; attempt++ {
		da, db, dc := a.Backoff(attempt), b.Backoff(attempt), c.Backoff(attempt)
		same = same && da == db
		differ = differ || da != dc
	}
	require.True(t, same, "one seed, one sequence")
	require.True(t, differ, "another seed, another sequence")
}

func TestBackoffWithTheRuntimeSource(t *testing.T) {
	r, err := retry.New(&retry.Policy{Base: time.Millisecond, Cap: time.Second})
	require.NoError(t, err)
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := r.Backoff(3)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.Less(t, d, 4*time.Millisecond)
		seen[d] = true
	}
	require.Greater(t, len(seen), 900, "the draws vary")
}

// A source that is not safe for concurrent use (PCG) serves many goroutines
// through one Retrier; -race checks the guard.
func TestBackoffConcurrentSharedSource(t *testing.T) {
	r := newRetrier(t, 7, retry.Policy{Base: time.Millisecond, Cap: time.Second})
	var wg sync.WaitGroup
	errs := make(chan time.Duration, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				attempt := 1 + (g+i)%12
				if d := r.Backoff(attempt); d < 0 || d >= r.Ceiling(attempt) {
					errs <- d
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for d := range errs {
		require.Fail(t, "delay out of bounds", "%v", d)
	}
}

func BenchmarkBackoff(b *testing.B) {
	for _, bc := range []struct {
		name string
		src  rand.Source
	}{{"runtime", nil}, {"seeded", rand.NewPCG(1, 2)}} {
		b.Run(bc.name, func(b *testing.B) {
			r, err := retry.New(&retry.Policy{Rand: bc.src})
			require.NoError(b, err)
			for i := 0; b.Loop(); i++ {
				r.Backoff(1 + i%20)
			}
		})
	}
}

// panickySource panics on its first call, like a broken injected source.
type panickySource struct{ calls int }

func (p *panickySource) Uint64() uint64 {
	p.calls++
	if p.calls == 1 {
		panic("source broke")
	}
	return uint64(p.calls) << 40
}

// The source's panic reaches the caller, and the guard around the source
// is released on the way out: the next call does not deadlock.
func TestBackoffSourcePanicReleasesTheGuard(t *testing.T) {
	r, err := retry.New(&retry.Policy{Rand: &panickySource{}})
	require.NoError(t, err)
	require.PanicsWithValue(t, "source broke", func() { r.Backoff(1) })
	d := r.Backoff(1)
	require.GreaterOrEqual(t, d, time.Duration(0))
	require.Less(t, d, time.Second)
}
