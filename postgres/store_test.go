package postgres_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// TestOpenConcurrentlyCreatesTheSchemaOnce: hosts opening a new schema at
// once all succeed, one of them creating it.
func TestOpenConcurrentlyCreatesTheSchemaOnce(t *testing.T) {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		p := newPool(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), p, postgres.Options{Schema: schema, ExpireInterval: -1})
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var metas int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM "+userTable(schema, "meta")).Scan(&metas))
	require.Equal(t, 1, metas)
}

// TestOpenChecksTheSchema: a schema of a newer format, one that holds
// tables of the store's names but is not a store's, and bad options are
// refused with typed errors naming the problem, and change nothing.
func TestOpenChecksTheSchema(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	schema := freshSchema(t, pool)
	s := openStore(t, pool, postgres.Options{Schema: schema})
	require.NoError(t, s.Close())
	_, err := pool.Exec(ctx, "UPDATE "+userTable(schema, "meta")+" SET format = 3")
	require.NoError(t, err)
	_, err = postgres.Open(ctx, pool, postgres.Options{Schema: schema})
	require.ErrorIs(t, err, oncekv.ErrFormatVersion)
	require.Contains(t, err.Error(), "format 3")

	other := freshSchema(t, pool)
	_, err = pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{other}.Sanitize()+"; CREATE TABLE "+userTable(other, "marks")+" (id int)")
	require.NoError(t, err)
	_, err = postgres.Open(ctx, pool, postgres.Options{Schema: other})
	require.ErrorIs(t, err, oncekv.ErrNotOncekv)
	require.Contains(t, err.Error(), "marks")
	var meta bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", userTable(other, "meta")).Scan(&meta))
	require.False(t, meta, "nothing was created")

	_, err = postgres.Open(ctx, pool, postgres.Options{Schema: strings.Repeat("s", 64), Retention: time.Minute, WindowSpan: time.Hour, LockTimeout: -1})
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	for _, field := range []string{"Schema", "Retention", "LockTimeout"} {
		require.Contains(t, err.Error(), field)
	}
	_, err = postgres.Open(ctx, nil, postgres.Options{})
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	_, err = postgres.Open(ctx, pool, postgres.Options{Schema: freshSchema(t, pool), Retention: 2000 * time.Hour, WindowSpan: time.Hour})
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions, "over oncekv.MaxWindows partitions")
}

// TestSchemasKeepStoresApart: two stores of one database, in two
// schemas, apply the same key each for itself, and a key held in one is
// free in the other (their advisory locks differ).
func TestSchemasKeepStoresApart(t *testing.T) {
	pool := newPool(t)
	a, b := openStore(t, pool, postgres.Options{}), openStore(t, pool, postgres.Options{})
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k"}
	hold, held := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := a.Apply(ctx, req, func(context.Context, pgx.Tx) ([]byte, error) {
			close(held)
			<-hold
			return []byte("a"), nil
		})
		done <- err
	}()
	<-held
	res, err := b.Apply(ctx, req, func(context.Context, pgx.Tx) ([]byte, error) { return []byte("b"), nil })
	require.NoError(t, err, "a's running effect does not hold b's key")
	require.False(t, res.Duplicate)
	_, err = a.Apply(ctx, req, nil)
	require.ErrorIs(t, err, oncekv.ErrInProgress, "but it holds a's")
	close(hold)
	require.NoError(t, <-done)
	for s, want := range map[*postgres.Store]string{a: "a", b: "b"} {
		res, err := s.Apply(ctx, req, nil)
		require.NoError(t, err)
		require.Equal(t, want, string(res.Response))
	}
}

// TestBadRowIsAnError: a mark row that does not hold a mark (changed by
// hand) is an ErrCorrupt naming the table and the key, never a panic or
// a wrong answer.
func TestBadRowIsAnError(t *testing.T) {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	s := openStore(t, pool, postgres.Options{Schema: schema})
	ctx := context.Background()
	_, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE "+userTable(schema, "marks")+" SET fingerprint = '\\x00'")
	require.NoError(t, err)
	for _, call := range []func() error{
		func() error { _, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "k"}, nil); return err },
		func() error {
			rs, err := s.ApplyBatch(ctx, []oncekv.Request{{Handler: "h", Key: "k"}, {Handler: "h", Key: "other"}}, nil)
			if err == nil {
				err = rs[0].Err
			}
			return err
		},
		func() error { _, err := s.Claim(ctx, oncekv.Request{Handler: "h", Key: "k"}, time.Minute); return err },
	} {
		err := call()
		require.ErrorIs(t, err, oncekv.ErrCorrupt)
		var re *oncekv.RecordError
		require.ErrorAs(t, err, &re)
		require.Equal(t, schema+".marks", re.Bucket)
		require.Equal(t, "h/k", re.Key)
		require.Contains(t, err.Error(), "fingerprint of 1 bytes")
		require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
	}
}

// TestEffectTransactionBelongsToTheStore: an effect's Commit and Rollback
// do nothing (ErrEffectTx), a nested transaction is a savepoint of its
// own, and an effect that went on after a failed statement applies
// nothing.
func TestEffectTransactionBelongsToTheStore(t *testing.T) {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	s := openStore(t, pool, postgres.Options{Schema: schema})
	ctx := context.Background()
	table := userTable(schema, "effects")
	_, err := pool.Exec(ctx, "CREATE TABLE "+table+" (key text PRIMARY KEY)")
	require.NoError(t, err)
	res, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "commit"}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ('commit')"); err != nil {
			return nil, err
		}
		require.ErrorIs(t, tx.Commit(ctx), postgres.ErrEffectTx)
		require.ErrorIs(t, tx.Rollback(ctx), postgres.ErrEffectTx)
		nested, err := tx.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := nested.Exec(ctx, "INSERT INTO "+table+" VALUES ('undone')"); err != nil {
			return nil, err
		}
		return []byte("ok"), nested.Rollback(ctx)
	})
	require.NoError(t, err)
	require.Equal(t, "ok", string(res.Response))
	var keys []string
	rows, err := pool.Query(ctx, "SELECT key FROM "+table+" ORDER BY key")
	require.NoError(t, err)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"commit"}, keys)

	_, err = s.Apply(ctx, oncekv.Request{Handler: "h", Key: "swallowed"}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		tx.Exec(ctx, "INSERT INTO "+table+" VALUES ('commit')") //nolint:errcheck // the effect's bug: it goes on
		return nil, nil
	})
	require.ErrorContains(t, err, "aborted")
	res, err = s.Apply(ctx, oncekv.Request{Handler: "h", Key: "swallowed"}, nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "nothing was recorded")
}

// TestEffectPanic: a panicking effect applies nothing and its panic
// reaches the caller; in a batch, the others commit first.
func TestEffectPanic(t *testing.T) {
	pool := newPool(t)
	s := openStore(t, pool, postgres.Options{})
	ctx := context.Background()
	require.PanicsWithValue(t, "boom", func() {
		s.Apply(ctx, oncekv.Request{Handler: "h", Key: "p"}, func(context.Context, pgx.Tx) ([]byte, error) { panic("boom") }) //nolint:errcheck // it panics
	})
	res, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "p"}, nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	reqs := []oncekv.Request{{Handler: "h", Key: "b1"}, {Handler: "h", Key: "b2"}, {Handler: "h", Key: "b3"}}
	require.PanicsWithValue(t, "boom", func() {
		s.ApplyBatch(ctx, reqs, func(_ context.Context, _ pgx.Tx, i int) ([]byte, error) { //nolint:errcheck // it panics
			if i == 1 {
				panic("boom")
			}
			return nil, nil
		})
	})
	rs, err := s.ApplyBatch(ctx, reqs, nil)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true}, []bool{rs[0].Duplicate, rs[1].Duplicate, rs[2].Duplicate})
}

// TestDuplicateIsLogged: a duplicate is logged at info level, with its
// handler, key and age, as the embedded store logs it.
func TestDuplicateIsLogged(t *testing.T) {
	var buf bytes.Buffer
	s := openStore(t, newPool(t), postgres.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	for range 2 {
		_, err := s.Apply(context.Background(), oncekv.Request{Handler: "billing", Key: "evt-9"}, nil)
		require.NoError(t, err)
	}
	require.Contains(t, buf.String(), `level=INFO msg="duplicate suppressed" handler=billing key=evt-9 age=`)
}

// TestExamples runs the examples' code against the test cluster and
// checks what it prints.
func TestExamples(t *testing.T) {
	pool := newPool(t)
	for name, tc := range map[string]struct {
		run  func(context.Context, *pgxpool.Pool, string) error
		want string
	}{
		"Example":                   {deposit, "delivery 1: deposited, duplicate false\ndelivery 2: deposited, duplicate true\nbalance: 100\n"},
		"ExampleStore_Claim":        {charge, "charged: receipt for 4494f426\na retry: done true, receipt for 4494f426\n"},
		"ExampleStore_AdvanceFence": {fenced, "the stale leader's write: true\n"},
		"ExampleStore_ApplyBatch":   {poll, "e-1: duplicate false, error <nil>\ne-2: duplicate false, error <nil>\ne-1: duplicate true, error <nil>\n"},
	} {
		t.Run(name, func(t *testing.T) {
			out := captureStdout(t, func() { require.NoError(t, tc.run(context.Background(), pool, freshSchema(t, pool))) })
			require.Equal(t, tc.want, out)
		})
	}
}

// captureStdout returns what fn printed.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = saved }()
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	fn()
	require.NoError(t, w.Close())
	os.Stdout = saved
	return <-done
}
