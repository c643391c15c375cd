package pgidem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/postgres"
	"github.com/oncekv/oncekv/postgres/internal/pgtest"
	"github.com/oncekv/oncekv/postgres/pgidem"
)

// ExampleNew is a payments endpoint on PostgreSQL: the payment row is
// staged, so it commits with the stored 201, and a retry (on this replica
// or any other that opens the schema) gets the 201 back without a second
// row. It runs against the PostgreSQL of ONCEKV_PG_DSN; TestExampleNew
// checks what it prints.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("ONCEKV_PG_DSN"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	lines, err := payments(ctx, pool, "pgidem_example")
	if err != nil {
		fmt.Println(err)
	}
	fmt.Print(strings.Join(lines, ""))
}

// payments is ExampleNew's body, in schema (dropped at the end).
func payments(ctx context.Context, pool *pgxpool.Pool, schema string) ([]string, error) {
	defer pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") //nolint:errcheck // best effort
	store, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	table := pgx.Identifier{schema, "payments"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (key text, amount bigint)"); err != nil {
		return nil, err
	}
	mw, err := pgidem.New(store, &idemhttp.Options{
		// Required: records are kept per (caller, key), never shared.
		Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
	})
	if err != nil {
		return nil, err
	}
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := pgidem.Stage(r, func(ctx context.Context, tx pgx.Tx) error { // commits with the stored 201
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1, 1200)", idemhttp.Key(r))
			return err
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "receipt R-1")
	})
	srv := httptest.NewServer(mw.Wrap(pay))
	defer srv.Close()

	var lines []string
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":1200}`))
		req.Header.Set("Idempotency-Key", "pay-1")
		req.Header.Set("X-User", "alice")
		resp, err := srv.Client().Do(req)
		if err != nil {
			return lines, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		lines = append(lines, fmt.Sprintf("%d %s replayed=%t\n", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed") == "true"))
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
		return lines, err
	}
	return append(lines, fmt.Sprintf("payment rows: %d\n", rows)), nil
}

// TestExampleNew runs ExampleNew's body and checks what it prints.
func TestExampleNew(t *testing.T) {
	pool := pgtest.NewPool(t)
	lines, err := payments(context.Background(), pool, pgtest.FreshSchema(t, pool))
	require.NoError(t, err)
	require.Equal(t, []string{
		"201 receipt R-1 replayed=false\n",
		"201 receipt R-1 replayed=true\n",
		"payment rows: 1\n",
	}, lines)
}
