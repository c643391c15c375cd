package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// TestOneMarkAcrossPartitions: PostgreSQL cannot enforce one mark per key
// across the partitions of the marks table, so the store does, with the
// key's advisory lock and a look-up of every live partition under it.
// Three hosts (pools) apply the same few keys from 8 goroutines while a
// clock shared by all moves on by a window at a time, so that deliveries
// of one key at once read the clock in different windows and would write
// their marks into different partitions; the effect appends a row to a
// user table with no key of its own. Every key is applied once, and has
// one mark. (Seen failing with the locks taken away: keys applied twice,
// or two marks of a key in one partition.)
func TestOneMarkAcrossPartitions(t *testing.T) {
	schema := freshSchema(t, newPool(t))
	var now atomic.Int64
	now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	opts := postgres.Options{Schema: schema, Retention: 10 * time.Minute, WindowSpan: time.Minute, Now: clock}
	var stores []*postgres.Store
	for range 3 {
		stores = append(stores, openStore(t, newPool(t), opts))
	}
	pool := newPool(t)
	ctx := context.Background()
	table := userTable(schema, "applications")
	_, err := pool.Exec(ctx, "CREATE TABLE "+table+" (key text NOT NULL, host int NOT NULL)")
	require.NoError(t, err)

	const keys, rounds = 8, 12
	var wg sync.WaitGroup
	var busy, dups atomic.Int64
	errs := make(chan error, 8*keys*rounds)
	// The shared clock moves to the next window every 96 of the 768
	// applications: 8 windows in all, so a key's three rounds cross windows
	// but never outlive Retention (10 windows), however slow the machine.
	var done atomic.Int64
	tick := func() {
		if done.Add(1)%96 == 0 {
			now.Add(int64(time.Minute))
		}
	}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%len(stores)]
			for r := range rounds {
				for k := range keys {
					key := fmt.Sprintf("k%d-%d", r/3, k) // each key through 3 rounds, so across windows
					res, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
						_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", key, g)
						time.Sleep(time.Millisecond) // widen the race
						return nil, err
					})
					tick()
					switch {
					case errors.Is(err, oncekv.ErrInProgress):
						busy.Add(1)
					case err != nil:
						errs <- err
					case res.Duplicate:
						dups.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var twice, applied, windows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT key FROM "+table+" GROUP BY key HAVING count(*) > 1) d").Scan(&twice))
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(DISTINCT key) FROM "+table).Scan(&applied))
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(DISTINCT win) FROM "+userTable(schema, "marks")).Scan(&windows))
	t.Logf("keys applied %d, in %d windows; duplicates %d, refused as in progress %d", applied, windows, dups.Load(), busy.Load())
	require.Zero(t, twice, "keys applied twice")
	require.Equal(t, keys*rounds/3, applied)
	require.GreaterOrEqual(t, windows, 2, "the marks are in more than one partition")
	requireOneMarkPerKey(t, pool, schema)
}
