package retry_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/retry"
)

// fakeClock is an injected clock that only moves when a test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newRetrier returns a Retrier for p with a source seeded by seed.
func newRetrier(t testing.TB, seed uint64, p retry.Policy) *retry.Retrier {
	t.Helper()
	p.Rand = rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	r, err := retry.New(&p)
	require.NoError(t, err)
	return r
}

// newBudget returns a budget on clock with o's other fields.
func newBudget(t testing.TB, clock *fakeClock, o retry.BudgetOptions) *retry.Budget {
	t.Helper()
	o.Now = clock.Now
	b, err := retry.NewBudget(&o)
	require.NoError(t, err)
	return b
}
