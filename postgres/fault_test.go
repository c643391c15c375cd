package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// killer runs, from a pool of its own, pg_terminate_backend on the
// backend of the transaction an effect runs in, as an operator, a
// failover or a network cut would end it.
type killer struct {
	t    *testing.T
	pool *pgxpool.Pool
}

// kill ends the backend serving tx and waits until it is gone.
func (k killer) kill(ctx context.Context, tx pgx.Tx) {
	var pid int
	require.NoError(k.t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	var ok bool
	require.NoError(k.t, k.pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1, 5000)", pid).Scan(&ok))
	require.True(k.t, ok)
}

// requireRetry checks that err says to deliver again.
func requireRetry(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	a := oncekv.Classify(err).Action
	require.True(t, a == oncekv.RetryLater || a == oncekv.RetryNow, "%v: %v", err, a)
}

// TestConnectionKilledMidTransactionAppliesNothing: a connection that
// dies while the effect's transaction is open (pg_terminate_backend)
// applies nothing, neither the effect's writes nor the mark, for Apply,
// ApplyBatch and Claim.Complete, and says so with an error Classify marks
// as a retry; the retry applies.
func TestConnectionKilledMidTransactionAppliesNothing(t *testing.T) {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	s := openStore(t, pool, postgres.Options{Schema: schema})
	k := killer{t, newPool(t)}
	ctx := context.Background()
	table := userTable(schema, "effects")
	_, err := pool.Exec(ctx, "CREATE TABLE "+table+" (key text NOT NULL)")
	require.NoError(t, err)
	rows := func(key string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE key = $1", key).Scan(&n))
		return n
	}
	write := func(ctx context.Context, tx pgx.Tx, key string) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", key)
		return err
	}
	for _, tc := range []struct {
		name string
		// after is what the effect does once its backend is gone: carry on
		// with SQL, or return at once, leaving the mark's write to fail.
		after func(ctx context.Context, tx pgx.Tx) error
	}{
		{"EffectCarriesOn", func(ctx context.Context, tx pgx.Tx) error { return write(ctx, tx, "after") }},
		{"EffectReturns", func(context.Context, pgx.Tx) error { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "apply-" + tc.name
			_, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				if err := write(ctx, tx, key); err != nil {
					return nil, err
				}
				k.kill(ctx, tx)
				return nil, tc.after(ctx, tx)
			})
			requireRetry(t, err)
			require.Zero(t, rows(key))
			res, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				return []byte("ok"), write(ctx, tx, key)
			})
			require.NoError(t, err)
			require.False(t, res.Duplicate, "nothing was recorded")
			require.Equal(t, 1, rows(key))

			// A batch: the connection dies in its third effect.
			reqs := []oncekv.Request{{Handler: "h", Key: key + "-1"}, {Handler: "h", Key: key + "-2"}, {Handler: "h", Key: key + "-3"}}
			rs, err := s.ApplyBatch(ctx, reqs, func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error) {
				if err := write(ctx, tx, reqs[i].Key); err != nil {
					return nil, err
				}
				if i == 2 {
					k.kill(ctx, tx)
					return nil, tc.after(ctx, tx)
				}
				return nil, nil
			})
			if err != nil {
				requireRetry(t, err)
			}
			// The killed transaction applied nothing. An effect that went
			// on met the dead connection as its own error: the others ran
			// again in a fresh transaction, as after any effect's error.
			applied := map[int]bool{}
			for i, r := range rs {
				if r.Err != nil {
					requireRetry(t, r.Err)
					require.Zero(t, rows(reqs[i].Key))
				} else {
					applied[i] = true
					require.Equal(t, 1, rows(reqs[i].Key))
				}
			}
			require.False(t, applied[2], "the request whose connection died")
			rs, err = s.ApplyBatch(ctx, reqs, func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error) {
				return nil, write(ctx, tx, reqs[i].Key)
			})
			require.NoError(t, err)
			for i, r := range rs {
				require.NoError(t, r.Err)
				require.Equal(t, applied[i], r.Duplicate)
				require.Equal(t, 1, rows(reqs[i].Key))
			}

			// Complete: the claim still holds the key, and completes on a
			// fresh connection.
			req := oncekv.Request{Handler: "h", Key: key + "-claim"}
			c, err := s.Claim(ctx, req, lease)
			require.NoError(t, err)
			_, err = c.Complete(ctx, []byte("done"), func(ctx context.Context, tx pgx.Tx) error {
				if err := write(ctx, tx, req.Key); err != nil {
					return err
				}
				k.kill(ctx, tx)
				return tc.after(ctx, tx)
			})
			requireRetry(t, err)
			require.False(t, errors.Is(err, oncekv.ErrFenced))
			require.Zero(t, rows(req.Key))
			_, err = s.Apply(ctx, req, nil)
			require.ErrorIs(t, err, oncekv.ErrInProgress, "the claim still holds the key")
			_, err = c.Complete(ctx, []byte("done"), func(ctx context.Context, tx pgx.Tx) error { return write(ctx, tx, req.Key) })
			require.NoError(t, err)
			require.Equal(t, 1, rows(req.Key))
		})
	}
}

const lease = 30e9 // 30s
