package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/postgres"
	"github.com/oncekv/oncekv/postgres/internal/pgtest"
)

// The test cluster, from .ci/postgres.sh (see internal/pgtest).
const dsnEnv = pgtest.DSNEnv

var (
	testDSN     = pgtest.DSN
	newPool     = pgtest.NewPool
	freshSchema = pgtest.FreshSchema
)

// openStore opens a store in a fresh schema, closed when the test ends.
func openStore(t testing.TB, pool *pgxpool.Pool, opts postgres.Options) *postgres.Store {
	t.Helper()
	if opts.Schema == "" {
		opts.Schema = freshSchema(t, pool)
	}
	if opts.ExpireInterval == 0 {
		opts.ExpireInterval = -1
	}
	s, err := postgres.Open(context.Background(), pool, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}
