package pgidem_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/httpbridge"
	"github.com/oncekv/oncekv/internal/idemhttptest"
	"github.com/oncekv/oncekv/postgres"
	"github.com/oncekv/oncekv/postgres/internal/pgtest"
	"github.com/oncekv/oncekv/postgres/pgidem"
)

// TestMiddleware runs idemhttp's suite (internal/idemhttptest), the one
// the embedded store runs, on PostgreSQL: each test in a schema of its
// own, the handlers' staged writes going to a table of that schema.
func TestMiddleware(t *testing.T) {
	pool := pgtest.NewPool(t)
	idemhttptest.Run(t, &idemhttptest.Harness{
		Open: func(t *testing.T, now func() time.Time) idemhttptest.Store {
			return openStore(t, pool, now)
		},
	})
}

// pgStore is a PostgreSQL store under the suite; its tables are rows of
// one table, rows, in the store's schema.
type pgStore struct {
	s    *postgres.Store
	pool *pgxpool.Pool
	rows string // the rows table, quoted
}

// openStore opens a store in a fresh schema on the clock now, with the
// rows table, closed when the test ends.
func openStore(t *testing.T, pool *pgxpool.Pool, now func() time.Time) *pgStore {
	t.Helper()
	ctx := context.Background()
	schema := pgtest.FreshSchema(t, pool)
	s, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema, ExpireInterval: -1, Now: now})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	rows := pgx.Identifier{schema, "rows"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE TABLE "+rows+" (tbl text, k text, v text, PRIMARY KEY (tbl, k))")
	require.NoError(t, err)
	return &pgStore{s: s, pool: pool, rows: rows}
}

func (p *pgStore) New(opts *idemhttp.Options) (httpbridge.Middleware, error) {
	m, err := pgidem.New(p.s, opts)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (p *pgStore) Put(r *http.Request, table, key, value string) error {
	return pgidem.Stage(r, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+p.rows+" VALUES ($1, $2, $3) ON CONFLICT (tbl, k) DO UPDATE SET v = excluded.v",
			table, key, value)
		return err
	})
}

func (p *pgStore) StageNil(r *http.Request) error { return pgidem.Stage(r, nil) }

func (p *pgStore) Fail(r *http.Request, err error) error {
	return pgidem.Stage(r, func(context.Context, pgx.Tx) error { return err })
}

func (p *pgStore) Keys(t testing.TB, table string) []string {
	t.Helper()
	rows, err := p.pool.Query(context.Background(), "SELECT k FROM "+p.rows+" WHERE tbl = $1 ORDER BY k", table)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	if len(keys) == 0 {
		return nil // as the embedded store's, for require.Empty and Equal alike
	}
	return keys
}

func (p *pgStore) Close() error { return p.s.Close() }

// TestNewRefusesANilStoreAndBadOptions: as idemhttp.New, every bad field
// named.
func TestNewRefusesANilStoreAndBadOptions(t *testing.T) {
	_, err := pgidem.New(nil, &idemhttp.Options{Scope: idemhttptest.UserScope})
	require.ErrorIs(t, err, idemhttp.ErrInvalidOptions)
	require.ErrorContains(t, err, "db is nil")
	_, err = pgidem.New(nil, &idemhttp.Options{MaxBodyBytes: -1})
	require.ErrorIs(t, err, idemhttp.ErrInvalidOptions)
	require.ErrorContains(t, err, "Scope")
	require.ErrorContains(t, err, "MaxBodyBytes")
}

// TestWrapRefusesAMiddlewareNotMadeByNew: a zero Middleware has no store.
func TestWrapRefusesAMiddlewareNotMadeByNew(t *testing.T) {
	var zero pgidem.Middleware
	require.PanicsWithValue(t, "pgidem: Wrap on a Middleware not made by New", func() { zero.Wrap(idemhttptest.Echo) })
	var nilMW *pgidem.Middleware
	require.Panics(t, func() { nilMW.WrapCanonicalJSON(idemhttptest.Echo) })
}

// TestStageOfTheOtherStoreIsRefused: idemhttp.Stage's bbolt write on a
// PostgreSQL request, and this package's Stage on no claim, are
// ErrNoClaim, not a write that would fail at commit.
func TestStageOfTheOtherStoreIsRefused(t *testing.T) {
	p := openStore(t, pgtest.NewPool(t), time.Now)
	var bolt, none error
	mw, err := p.New(&idemhttp.Options{Scope: idemhttptest.UserScope})
	require.NoError(t, err)
	srv := idemhttptest.ServeRaw(t, mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "" {
			none = p.Put(r, "t", "k", "v")
			return
		}
		bolt = idemhttp.Stage(r, func(*oncekv.Tx) error { return errors.New("never run") })
		w.WriteHeader(http.StatusCreated)
	})))
	require.Equal(t, http.StatusCreated, idemhttptest.Send(t, srv, idemhttptest.Call{Key: "k", User: "alice"}).Status)
	idemhttptest.Send(t, srv, idemhttptest.Call{User: "alice"})
	require.ErrorIs(t, bolt, idemhttp.ErrNoClaim)
	require.ErrorContains(t, bolt, "not an *oncekv.DB")
	require.ErrorIs(t, none, idemhttp.ErrNoClaim)
}
