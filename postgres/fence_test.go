package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// waitingForLock waits until some backend of pool's database waits for a
// lock (a heavyweight lock, as a row lock is), or fails the test.
func waitingForLock(t *testing.T, pool *pgxpool.Pool, query string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1", "%"+query+"%").Scan(&n))
		if n > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "nobody waits for a lock on %q", query)
		time.Sleep(5 * time.Millisecond) // polling another backend's state
	}
}

// TestAdvanceFenceHoldsTheRowUntilTheTransactionEnds: AdvanceFence
// records a fence and keeps the resource's row locked until the caller's
// transaction ends, so a writer with another fence waits for it and is
// then judged against what it committed; a refused fence records nothing
// and holds the row too.
func TestAdvanceFenceHoldsTheRowUntilTheTransactionEnds(t *testing.T) {
	pool := newPool(t)
	s := openStore(t, pool, postgres.Options{})
	ctx := context.Background()
	advance := func(fence uint64) (pgx.Tx, error) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		return tx, s.AdvanceFence(ctx, tx, "acct-1", fence)
	}
	first, err := advance(7)
	require.NoError(t, err)
	// A newer writer waits for the first one's transaction...
	result := make(chan error, 1)
	go func() {
		tx, err := advance(6)
		if tx != nil {
			tx.Rollback(ctx) //nolint:errcheck // only the answer counts
		}
		result <- err
	}()
	waitingForLock(t, pool, "fences")
	require.Empty(t, result)
	require.NoError(t, first.Commit(ctx))
	// ...and is refused by what it committed.
	err = <-result
	var fe *oncekv.FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, oncekv.FenceError{Stored: 7, Presented: 6}, *fe)
	require.Contains(t, err.Error(), "acct-1")

	// A refused fence holds the row as well, and a rollback records
	// nothing.
	refused, err := advance(3)
	require.ErrorIs(t, err, oncekv.ErrFenced)
	go func() {
		tx, err := advance(8)
		if err == nil {
			err = tx.Commit(ctx)
		}
		result <- err
	}()
	waitingForLock(t, pool, "fences")
	require.NoError(t, refused.Rollback(ctx))
	require.NoError(t, <-result)
	rolled, err := advance(9)
	require.NoError(t, err)
	require.NoError(t, rolled.Rollback(ctx))
	tx, err := advance(9)
	require.NoError(t, err, "the rolled back 9 was not recorded")
	require.NoError(t, tx.Commit(ctx))

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // a test's
	require.ErrorIs(t, s.AdvanceFence(ctx, tx, "acct-1", 0), oncekv.ErrInvalidFence)
	require.ErrorIs(t, s.AdvanceFence(ctx, tx, "", 1), oncekv.ErrResourceRequired)
	require.ErrorIs(t, s.AdvanceFence(ctx, nil, "acct-1", 10), oncekv.ErrInvalidOptions)
}

// TestNextFenceAcrossHosts: tokens of one resource drawn at once from
// several hosts are all distinct and, per host, strictly increasing.
func TestNextFenceAcrossHosts(t *testing.T) {
	schema := freshSchema(t, newPool(t))
	const hosts, each = 3, 50
	got := make(chan []uint64, hosts)
	for range hosts {
		s := openStore(t, newPool(t), postgres.Options{Schema: schema})
		go func() {
			var mine []uint64
			for range each {
				n, err := s.NextFence(context.Background(), "leader")
				if err != nil {
					got <- nil
					return
				}
				mine = append(mine, n)
			}
			got <- mine
		}()
	}
	seen := map[uint64]bool{}
	for range hosts {
		mine := <-got
		require.Len(t, mine, each)
		for i, n := range mine {
			require.False(t, seen[n], "token %d issued twice", n)
			seen[n] = true
			if i > 0 {
				require.Greater(t, n, mine[i-1])
			}
		}
	}
	require.Len(t, seen, hosts*each)
	for n := uint64(1); n <= hosts*each; n++ {
		require.True(t, seen[n], "the counter is dense: %d", n)
	}
}
