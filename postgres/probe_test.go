package postgres_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// TestConcurrentTakeoversProbeOnce: 8 goroutines on two hosts take over
// the same abandoned claim at once, with a slow probe: one takeover wins
// and probes, once; the others get ErrInProgress (its lease) or, once it
// recorded the probe's answer, a Done claim; none runs anything.
func TestConcurrentTakeoversProbeOnce(t *testing.T) {
	ctx := context.Background()
	schema := freshSchema(t, newPool(t))
	var mu sync.Mutex
	clock := time.Date(2030, 1, 2, 3, 30, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	hosts := []*postgres.Store{
		openStore(t, newPool(t), postgres.Options{Schema: schema, Now: now}),
		openStore(t, newPool(t), postgres.Options{Schema: schema, Now: now}),
	}
	r := oncekv.Request{Handler: "charge", Key: "order-1", Payload: []byte("100 EUR")}
	dead, err := hosts[0].Claim(ctx, r, time.Minute)
	require.NoError(t, err)
	mu.Lock()
	clock = clock.Add(time.Minute)
	mu.Unlock()
	var probes atomic.Int32
	opts := &oncekv.ClaimOptions{Probe: func(_ context.Context, key string, prev oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		probes.Add(1)
		if key != dead.Key() || prev.Token != dead.Token() {
			return oncekv.OutcomeUnknown, nil, errors.New("asked about another attempt")
		}
		time.Sleep(50 * time.Millisecond)
		return oncekv.OutcomeApplied, []byte("receipt"), nil
	}}
	var wg sync.WaitGroup
	var done, busy atomic.Int32
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			c, err := hosts[g%2].ClaimWith(ctx, r, time.Minute, opts)
			switch {
			case errors.Is(err, oncekv.ErrInProgress):
				busy.Add(1)
			case err != nil:
				errs <- err
			case c.Done() && string(c.Result().Response) == "receipt":
				done.Add(1)
			default:
				errs <- errors.New("a claim to run the effect again")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int32(1), probes.Load(), "one takeover, one probe")
	require.GreaterOrEqual(t, done.Load(), int32(1))
	require.Equal(t, int32(8), done.Load()+busy.Load())
	res, err := hosts[1].Apply(ctx, r, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "receipt", string(res.Response))
}
