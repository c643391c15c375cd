package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/conformance"
	"github.com/oncekv/oncekv/postgres"
)

// TestConformance runs the suite both stores pass (oncekv's
// internal/conformance) against the PostgreSQL store, each test in a
// schema of its own.
func TestConformance(t *testing.T) { runConformance(t, false) }

// TestConformanceWithSavepoints runs the suite with the way of undoing a
// batch's failed effect that BenchmarkApplyBatchUndo measured against the
// store's (a savepoint around every effect), so that the figures compare
// two correct implementations.
func TestConformanceWithSavepoints(t *testing.T) { runConformance(t, true) }

func runConformance(t *testing.T, savepoints bool) {
	pool := newPool(t)
	conformance.Run(t, &conformance.Harness{
		Kind: conformance.Shared,
		Open: func(t *testing.T, cfg conformance.Config) conformance.Store {
			schema := freshSchema(t, pool)
			s, err := postgres.Open(context.Background(), pool, sharedOptions(schema, cfg))
			require.NoError(t, err)
			postgres.SetSavepoints(s, savepoints)
			u := &shared{s: s, pool: pool, schema: schema, q: userQueries(schema)}
			_, err = pool.Exec(context.Background(), u.q.create)
			require.NoError(t, err)
			return u
		},
		Reopen: func(t *testing.T, s conformance.Store, cfg conformance.Config) (conformance.Store, error) {
			u := s.(*shared)
			require.NoError(t, u.s.Close())
			st, err := postgres.Open(context.Background(), pool, sharedOptions(u.schema, cfg))
			if err != nil {
				return nil, err
			}
			postgres.SetSavepoints(st, savepoints)
			return &shared{s: st, pool: pool, schema: u.schema, q: u.q}, nil
		},
		LimitResponse: func(s conformance.Store, n int) { postgres.SetMaxResponseSize(s.(*shared).s, n) },
	})
}

func sharedOptions(schema string, cfg conformance.Config) postgres.Options {
	return postgres.Options{Schema: schema, Retention: cfg.Retention, WindowSpan: cfg.WindowSpan, Now: cfg.Now, ExpireInterval: -1,
		TombstoneRetention: cfg.TombstoneRetention}
}

// shared is the conformance suite's view of a Store: counters in the
// table user_counters, fenced values in user_values, both in the store's
// schema, as a user's own tables.
type shared struct {
	s      *postgres.Store
	pool   *pgxpool.Pool
	schema string
	q      userSQL
}

type userSQL struct{ create, inc, count, write, value string }

func userQueries(schema string) userSQL {
	s := pgx.Identifier{schema}.Sanitize()
	return userSQL{
		create: "CREATE TABLE " + s + ".user_counters (name text PRIMARY KEY, n bigint NOT NULL);" +
			"CREATE TABLE " + s + ".user_values (resource text PRIMARY KEY, value text NOT NULL)",
		inc:   "INSERT INTO " + s + ".user_counters AS c (name, n) VALUES ($1, 1) ON CONFLICT (name) DO UPDATE SET n = c.n + 1",
		count: "SELECT coalesce((SELECT n FROM " + s + ".user_counters WHERE name = $1), 0)",
		write: "INSERT INTO " + s + ".user_values AS v (resource, value) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET value = excluded.value",
		value: "SELECT coalesce((SELECT value FROM " + s + ".user_values WHERE resource = $1), '')",
	}
}

// effect turns the suite's Effect into the Store's.
func (u *shared) effect(e *conformance.Effect) func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
	if e == nil {
		return nil
	}
	return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		if e.Counter != "" {
			if _, err := tx.Exec(ctx, u.q.inc, e.Counter); err != nil {
				return nil, err
			}
		}
		if e.Hook != nil {
			e.Hook()
		}
		return e.Response, e.Err
	}
}

func (u *shared) Apply(ctx context.Context, req oncekv.Request, e *conformance.Effect) (oncekv.Result, error) {
	return u.s.Apply(ctx, req, u.effect(e))
}

func (u *shared) ApplyBatch(ctx context.Context, reqs []oncekv.Request, e func(i int) *conformance.Effect) ([]oncekv.BatchResult, error) {
	return u.s.ApplyBatch(ctx, reqs, func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error) {
		if fn := u.effect(e(i)); fn != nil {
			return fn(ctx, tx)
		}
		return nil, nil
	})
}

func (u *shared) Claim(ctx context.Context, req oncekv.Request, lease time.Duration) (conformance.Claim, error) {
	c, err := u.s.Claim(ctx, req, lease)
	if err != nil {
		return nil, err
	}
	return sharedClaim{c, u}, nil
}

func (u *shared) ClaimWith(ctx context.Context, req oncekv.Request, lease time.Duration, opts *oncekv.ClaimOptions) (conformance.Claim, error) {
	c, err := u.s.ClaimWith(ctx, req, lease, opts)
	if err != nil {
		return nil, err
	}
	return sharedClaim{c, u}, nil
}

func (u *shared) Parked(ctx context.Context) (marks []oncekv.MarkInfo, err error) {
	err = u.s.Parked(ctx, func(m oncekv.MarkInfo) error {
		marks = append(marks, m)
		return nil
	})
	return marks, err
}

func (u *shared) ResolveParked(ctx context.Context, handler, key string, applied bool, response []byte) error {
	return u.s.ResolveParked(ctx, handler, key, applied, response)
}

func (u *shared) NextFence(ctx context.Context, resource string) (uint64, error) {
	return u.s.NextFence(ctx, resource)
}

func (u *shared) FencedWrite(ctx context.Context, resource string, fence uint64, value string) error {
	return pgx.BeginFunc(ctx, u.pool, func(tx pgx.Tx) error {
		if err := u.s.AdvanceFence(ctx, tx, resource, fence); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, u.q.write, resource, value)
		return err
	})
}

func (u *shared) Value(ctx context.Context, resource string) (v string, err error) {
	err = u.pool.QueryRow(ctx, u.q.value, resource).Scan(&v)
	return v, err
}

func (u *shared) Count(ctx context.Context, counter string) (n int, err error) {
	err = u.pool.QueryRow(ctx, u.q.count, counter).Scan(&n)
	return n, err
}

func (u *shared) Expire(ctx context.Context) (oncekv.ExpireStats, error) { return u.s.Expire(ctx) }
func (u *shared) Now() time.Time                                         { return u.s.Now() }
func (u *shared) Close() error                                           { return u.s.Close() }

type sharedClaim struct {
	*postgres.Claim
	u *shared
}

func (c sharedClaim) Complete(ctx context.Context, response []byte, e *conformance.Effect) (oncekv.Result, error) {
	var fn func(ctx context.Context, tx pgx.Tx) error
	if eff := c.u.effect(e); eff != nil {
		fn = func(ctx context.Context, tx pgx.Tx) error {
			_, err := eff(ctx, tx)
			return err
		}
	}
	return c.Claim.Complete(ctx, response, fn)
}
