package pgidem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/postgres"
	"github.com/oncekv/oncekv/postgres/internal/pgtest"
	"github.com/oncekv/oncekv/postgres/pgidem"
)

// paymentsOnEitherStore is the README's HTTP section: one payments handler
// behind the same Options, on a replica's own bbolt file (idemhttp) and on
// the PostgreSQL schema replicas share (pgidem); only the staging of the
// handler's write differs.
func paymentsOnEitherStore(db *oncekv.DB, store *postgres.Store, table string) (embedded, shared http.Handler, err error) {
	opts := &idemhttp.Options{ // the same options for both stores
		Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
	}
	answer := func(w http.ResponseWriter, err error) {
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "receipt R-1")
	}

	local, err := idemhttp.New(db, opts) // one replica: its own file
	if err != nil {
		return nil, nil, err
	}
	embedded = local.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, idemhttp.Stage(r, func(tx *oncekv.Tx) error { // commits with the stored 201
			b, err := tx.CreateBucketIfNotExists([]byte("payments"))
			if err != nil {
				return err
			}
			return b.Put([]byte(idemhttp.Key(r)), []byte("1200"))
		}))
	}))

	replicas, err := pgidem.New(store, opts) // many replicas: one schema
	if err != nil {
		return nil, nil, err
	}
	shared = replicas.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, pgidem.Stage(r, func(ctx context.Context, tx pgx.Tx) error { // commits with the stored 201
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1, 1200)", idemhttp.Key(r))
			return err
		}))
	}))
	return embedded, shared, nil
}

// TestPaymentsOnEitherStore runs the README's handler on both stores: the
// retry of a payment is the first answer replayed, and the payment is
// written once, in the bbolt file and in the PostgreSQL table alike.
func TestPaymentsOnEitherStore(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	schema := pgtest.FreshSchema(t, pool)
	store, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	table := pgx.Identifier{schema, "payments"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE TABLE "+table+" (key text, amount bigint)")
	require.NoError(t, err)
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "replica.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	embedded, shared, err := paymentsOnEitherStore(db, store, table)
	require.NoError(t, err)
	for name, h := range map[string]http.Handler{"embedded": embedded, "postgres": shared} {
		srv := httptest.NewServer(h)
		var got []string
		for range 2 {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":1200}`))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "pay-1")
			req.Header.Set("X-User", "alice")
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			got = append(got, fmt.Sprintf("%d %s replayed=%s", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed")))
		}
		srv.Close()
		require.Equal(t, []string{"201 receipt R-1 replayed=", "201 receipt R-1 replayed=true"}, got, name)
	}

	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows))
	require.Equal(t, 1, rows, "payment rows in PostgreSQL")
	var payments []string
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		return tx.Bucket([]byte("payments")).ForEach(func(k, v []byte) error {
			payments = append(payments, string(v)) // k is idemhttp.Key: derived from the caller and the header
			return nil
		})
	}))
	require.Equal(t, []string{"1200"}, payments, "payments in the bbolt file")
}
