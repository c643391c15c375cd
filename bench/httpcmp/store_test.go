package httpcmp

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/postgres"
	"github.com/oncekv/oncekv/postgres/pgidem"
)

// dsnVar names the environment variable with the PostgreSQL DSN, the one
// the bench module's PostgreSQL peers read.
const dsnVar = "ONCEKV_BENCH_PG_DSN"

// noPG is why the PostgreSQL cells are skipped without a DSN.
const noPG = dsnVar + " is not set: the PostgreSQL cells (pg/...) are skipped; " +
	"dsn=$(bash ../.ci/postgres.sh) starts one (.ci/pg.sh sets it)"

// store is a store the middleware runs on in the rig: missing says why it
// cannot run here ("" when it can); open returns the middleware's Wrap
// over a fresh durable store, closed when tb ends, and commits, the
// store's write transactions so far.
type store struct {
	name    string
	missing func() string
	open    func(tb testing.TB) (wrap func(http.Handler) http.Handler, commits func() commits)
}

// commits counts a store's write transactions: n of them, and for the
// embedded store the time they took (write lock held, fsync included;
// zero for PostgreSQL, whose commits the server times).
type commits struct {
	n    uint64
	took time.Duration
}

func (c commits) sub(o commits) commits { return commits{c.n - o.n, c.took - o.took} }

// scope is the middleware's scope: the caller named by X-User.
func scope(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }

// embedded is oncekv's bbolt store in tb's temp dir, fsync on every
// commit, through idemhttp; commits counts its commits
// (Stats.CommitHistograms).
var embedded = store{"embedded", func() string { return "" }, func(tb testing.TB) (func(http.Handler) http.Handler, func() commits) {
	db, err := oncekv.Open(filepath.Join(tb.TempDir(), "http.db"), &oncekv.Options{ExpireInterval: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	mw, err := idemhttp.New(db, &idemhttp.Options{Scope: scope})
	if err != nil {
		tb.Fatal(err)
	}
	return mw.Wrap, func() commits {
		h := db.Stats().CommitHistograms
		return commits{h.Count, h.DurationSum}
	}
}}

// schemas numbers the rig's PostgreSQL schemas within the process.
var schemas atomic.Int64

// pg is oncekv's PostgreSQL store (module postgres/) in a fresh schema on
// $ONCEKV_BENCH_PG_DSN, through pgidem; commits counts the transaction ids
// the server assigned (every transaction that wrote, whoever ran it: the
// rig's cluster is its own). It is missing without a DSN.
var pg = store{"pg", func() string {
	if os.Getenv(dsnVar) == "" {
		return noPG
	}
	return ""
}, func(tb testing.TB) (func(http.Handler) http.Handler, func() commits) {
	pool, s := openPG(tb)
	ctx := context.Background()
	mw, err := pgidem.New(s, &idemhttp.Options{Scope: scope})
	if err != nil {
		tb.Fatal(err)
	}
	return mw.Wrap, func() commits {
		var next uint64
		err := pool.QueryRow(ctx, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").Scan(&next)
		if err != nil {
			tb.Fatal(err)
		}
		return commits{n: next}
	}
}}

// openPG opens a pool on $ONCEKV_BENCH_PG_DSN and oncekv's PostgreSQL
// store in a fresh schema, both closed and the schema dropped when tb
// ends.
func openPG(tb testing.TB) (*pgxpool.Pool, *postgres.Store) {
	cfg, err := pgxpool.ParseConfig(os.Getenv(dsnVar))
	if err != nil {
		tb.Fatal(err)
	}
	// More connections than clients plus their heartbeats: the pool's
	// default (4 on 2 cores) would queue the 8 clients on it.
	cfg.MaxConns = 32
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	schema := fmt.Sprintf("bench_httpcmp_%d_%d", os.Getpid(), schemas.Add(1))
	tb.Cleanup(func() { _, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
	s, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema, ExpireInterval: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return pool, s
}

// stores are the stores of every run, in the order their cells run.
var stores = []store{embedded, pg}
