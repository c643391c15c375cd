package oncekv_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// requireStatsAddUp checks that Total is the sum of every handler entry
// and the overflow entry, plus the store-wide invalid count.
func requireStatsAddUp(t *testing.T, st oncekv.Stats) {
	t.Helper()
	sum := st.OtherHandlers
	for h, c := range st.Handlers {
		require.Zero(t, c.InvalidRequests, "handler %.40q: invalid requests count store-wide only", h)
		sum.Applied += c.Applied
		sum.DuplicatesSuppressed += c.DuplicatesSuppressed
		sum.Aborted += c.Aborted
		sum.KeyReuses += c.KeyReuses
	}
	require.Equal(t, st.Total.Applied, sum.Applied)
	require.Equal(t, st.Total.DuplicatesSuppressed, sum.DuplicatesSuppressed)
	require.Equal(t, st.Total.Aborted, sum.Aborted)
	require.Equal(t, st.Total.KeyReuses, sum.KeyReuses)
}

// TestInvalidRequestsCreateNoHandlerEntries sends requests that are bad
// input, each under a handler name never seen before (thousands of
// distinct names, and a hundred names of 1 MiB), through Apply, ApplyBatch
// and Claim. None of them may create a per-handler entry or keep its name
// alive; each is counted once, store-wide, in Total.InvalidRequests.
func TestInvalidRequestsCreateNoHandlerEntries(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	const distinct, huge = 3000, 100
	sent := 0
	for i := range distinct {
		req := oncekv.Request{Handler: fmt.Sprintf("h-%d", i)} // no key
		switch i % 3 {
		case 0:
			_, err := db.Apply(ctx, req, nil)
			require.ErrorIs(t, err, oncekv.ErrKeyRequired)
		case 1:
			res, err := db.ApplyBatch(ctx, []oncekv.Request{req, {Key: "k"}}, nil)
			require.NoError(t, err)
			require.ErrorIs(t, res[0].Err, oncekv.ErrKeyRequired)
			require.ErrorIs(t, res[1].Err, oncekv.ErrHandlerRequired)
			sent++
		case 2:
			_, err := db.Claim(ctx, req, time.Minute)
			require.ErrorIs(t, err, oncekv.ErrKeyRequired)
		}
		sent++
	}
	for i := range huge {
		name := fmt.Sprintf("%d-%s", i, strings.Repeat("h", 1<<20))
		_, err := db.Apply(ctx, oncekv.Request{Handler: name, Key: "k"}, nil)
		require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
		_, err = db.Claim(ctx, oncekv.Request{Handler: name, Key: "k"}, time.Minute)
		require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
		sent += 2
	}
	st := db.Stats()
	require.Empty(t, st.Handlers, "invalid requests must not create entries")
	require.Equal(t, oncekv.Counters{}, st.OtherHandlers)
	require.Equal(t, uint64(sent), st.Total.InvalidRequests)
	requireStatsAddUp(t, st)

	// A valid request still gets its entry, with nothing invalid in it.
	_, err := db.Apply(ctx, oncekv.Request{Handler: "h-1", Key: "k"}, nil)
	require.NoError(t, err)
	st = db.Stats()
	require.Equal(t, map[string]oncekv.Counters{"h-1": {Applied: 1}}, st.Handlers)
	require.Equal(t, uint64(sent), st.Total.InvalidRequests)
}

// TestAbortedHugeHandlerIsNotKept: a call whose context is already done is
// counted before its request is validated. A handler name no request could
// carry (longer than bbolt's largest key) must still not become an entry.
func TestAbortedHugeHandlerIsNotKept(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 {
		name := fmt.Sprintf("%d-%s", i, strings.Repeat("h", 1<<20))
		_, err := db.Apply(ctx, oncekv.Request{Handler: name, Key: "k"}, nil)
		require.ErrorIs(t, err, context.Canceled)
		_, err = db.Claim(ctx, oncekv.Request{Handler: name, Key: "k"}, time.Minute)
		require.ErrorIs(t, err, context.Canceled)
	}
	st := db.Stats()
	for h := range st.Handlers {
		require.LessOrEqual(t, len(h), bolt.MaxKeySize, "a handler name no request can carry was kept")
	}
	require.Empty(t, st.Handlers)
	require.Equal(t, uint64(40), st.OtherHandlers.Aborted)
	require.Equal(t, uint64(40), st.Total.Aborted)
}

// TestHandlerStatsCappedAtMax: more valid handlers than
// Options.MaxHandlerStats, sequential then concurrent. The first handlers
// keep their entries, the map stops at the cap, the rest are summed in
// OtherHandlers, and the totals count every request.
func TestHandlerStatsCappedAtMax(t *testing.T) {
	ctx := context.Background()
	t.Run("sequential", func(t *testing.T) {
		const limit, handlers = 7, 30
		db := oncetest.Open(t, &oncekv.Options{NoSync: true, MaxHandlerStats: limit})
		for h := range handlers {
			for k := range 2 {
				req := oncekv.Request{Handler: fmt.Sprintf("handler-%02d", h), Key: fmt.Sprint("k", k)}
				for range 2 { // the second delivery is a duplicate
					_, err := db.Apply(ctx, req, nil)
					require.NoError(t, err)
				}
			}
		}
		st := db.Stats()
		require.Len(t, st.Handlers, limit)
		for h := range limit {
			require.Equal(t, oncekv.Counters{Applied: 2, DuplicatesSuppressed: 2}, st.Handlers[fmt.Sprintf("handler-%02d", h)],
				"the first handlers seen keep their entries")
		}
		require.Equal(t, oncekv.Counters{Applied: 2 * (handlers - limit), DuplicatesSuppressed: 2 * (handlers - limit)}, st.OtherHandlers)
		require.Equal(t, oncekv.Counters{Applied: 2 * handlers, DuplicatesSuppressed: 2 * handlers}, st.Total)
		requireStatsAddUp(t, st)

		// Sub keeps the overflow entry's delta too.
		_, err := db.Apply(ctx, oncekv.Request{Handler: "late", Key: "k"}, nil)
		require.NoError(t, err)
		d := db.Stats().Sub(st)
		require.Equal(t, uint64(1), d.OtherHandlers.Applied)
		require.Equal(t, uint64(1), d.Total.Applied)
	})
	t.Run("concurrent", func(t *testing.T) {
		const limit, workers, each = 5, 8, 40
		db := oncetest.Open(t, &oncekv.Options{NoSync: true, MaxHandlerStats: limit})
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					req := oncekv.Request{Handler: fmt.Sprintf("w%d-h%d", w, i%10), Key: fmt.Sprint("k", i)}
					if _, err := db.Apply(ctx, req, nil); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		st := db.Stats()
		require.Len(t, st.Handlers, limit, "concurrent new names must not overshoot the cap")
		require.Equal(t, uint64(workers*each), st.Total.Applied)
		requireStatsAddUp(t, st)
	})
	t.Run("negative keeps no entries", func(t *testing.T) {
		db := oncetest.Open(t, &oncekv.Options{NoSync: true, MaxHandlerStats: -1})
		for i := range 5 {
			_, err := db.Apply(ctx, oncekv.Request{Handler: fmt.Sprint("h", i), Key: "k"}, nil)
			require.NoError(t, err)
		}
		st := db.Stats()
		require.Empty(t, st.Handlers)
		require.Equal(t, uint64(5), st.OtherHandlers.Applied)
		require.Equal(t, uint64(5), st.Total.Applied)
	})
	t.Run("default", func(t *testing.T) {
		db := oncetest.Open(t, &oncekv.Options{NoSync: true})
		reqs := make([]oncekv.Request, oncekv.DefaultMaxHandlerStats+50)
		for i := range reqs {
			reqs[i] = oncekv.Request{Handler: fmt.Sprint("h", i), Key: "k"}
		}
		res, err := db.ApplyBatch(ctx, reqs, nil)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
		st := db.Stats()
		require.Len(t, st.Handlers, oncekv.DefaultMaxHandlerStats)
		require.Equal(t, uint64(50), st.OtherHandlers.Applied)
		require.Equal(t, uint64(len(reqs)), st.Total.Applied)
	})
}

// TestContextEndedDuringEffectCountsAsAborted: Stats.Aborted covers a
// context that ended while the effect ran, whatever the effect returned
// (its context's error, or an error of its own); only an effect that
// failed with its context still live counts in EffectErrors.
func TestContextEndedDuringEffectCountsAsAborted(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	for i, ret := range []func(ctx context.Context) error{
		func(ctx context.Context) error { return ctx.Err() },
		func(context.Context) error { return fmt.Errorf("gateway: connection reset") },
	} {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint("cancelled-", i)},
			func(*oncekv.Tx) ([]byte, error) {
				cancel()
				return nil, ret(ctx)
			})
		require.Error(t, err)
	}
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "failed"},
		func(*oncekv.Tx) ([]byte, error) { return nil, fmt.Errorf("transient") })
	require.Error(t, err)

	st := db.Stats().Handlers["h"]
	require.Equal(t, uint64(2), st.Aborted, "the two contexts that ended during their effect")
	require.Equal(t, uint64(1), st.EffectErrors, "only the effect that failed with a live context")
	require.Zero(t, st.Applied)
}
