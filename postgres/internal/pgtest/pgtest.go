// Package pgtest holds the postgres module's test helpers: the test
// cluster's DSN (or a skip saying there is none), a pool on it, and
// schemas of their own for each test.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// DSNEnv names the variable holding the test cluster's DSN; .ci/pg.sh
// sets it, from .ci/postgres.sh.
const DSNEnv = "ONCEKV_PG_DSN"

// DSN returns the test cluster's DSN, or skips the test, saying so.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(DSNEnv)
	if dsn == "" {
		t.Skipf("%s is not set: no PostgreSQL to test against (start one with .ci/postgres.sh)", DSNEnv)
	}
	return dsn
}

// NewPool returns a pool on the test cluster, closed when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), DSN(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

var schemas atomic.Int64

// FreshSchema returns a schema name no other test uses (across the test
// binaries running at once too), dropped with everything in it when the
// test ends.
func FreshSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("t_%d_%d_%s", os.Getpid(), schemas.Add(1), strings.ToLower(sanitize(t.Name())))
	if len(name) > 63 {
		name = name[:63]
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	return name
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}
