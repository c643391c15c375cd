package idemhttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/httpbridge"
	"github.com/oncekv/oncekv/internal/idemhttptest"
)

// TestMiddleware runs the middleware's suite (internal/idemhttptest), the
// one the PostgreSQL store's adapter runs too, on the embedded store.
func TestMiddleware(t *testing.T) {
	idemhttptest.Run(t, &idemhttptest.Harness{
		Open: func(t *testing.T, now func() time.Time) idemhttptest.Store {
			return embedded{openDB(t, now, nil)}
		},
	})
}

// embedded is the embedded store under the suite; its tables are
// buckets.
type embedded struct{ db *oncekv.DB }

func (e embedded) New(opts *idemhttp.Options) (httpbridge.Middleware, error) {
	m, err := idemhttp.New(e.db, opts)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (e embedded) Put(r *http.Request, table, key, value string) error {
	return idemhttp.Stage(r, func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(table))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), []byte(value))
	})
}

func (e embedded) StageNil(r *http.Request) error { return idemhttp.Stage(r, nil) }

func (e embedded) Fail(r *http.Request, err error) error {
	return idemhttp.Stage(r, func(*oncekv.Tx) error { return err })
}

func (e embedded) Keys(t testing.TB, table string) []string {
	t.Helper()
	var out []string
	require.NoError(t, e.db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte(table))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	}))
	return out
}

func (e embedded) Close() error { return e.db.Close() }

// openDB opens a durable store in t.TempDir() on the clock now.
func openDB(t testing.TB, now func() time.Time, opts *oncekv.Options) *oncekv.DB {
	t.Helper()
	o := oncekv.Options{ExpireInterval: -1, Now: now}
	if opts != nil {
		o = *opts
		o.Now = now
	}
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "http.db"), &o)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := db.Close(); err != nil && !errors.Is(err, oncekv.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return db
}

// serve starts a real server with h behind a middleware on db.
func serve(t testing.TB, db *oncekv.DB, opts *idemhttp.Options, h http.Handler) *httptest.Server {
	t.Helper()
	o := idemhttp.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Scope == nil {
		o.Scope = idemhttptest.UserScope
	}
	mw, err := idemhttp.New(db, &o)
	require.NoError(t, err)
	return idemhttptest.ServeRaw(t, mw.Wrap(h))
}
