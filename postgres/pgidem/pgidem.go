package pgidem

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/httpbridge"
	"github.com/oncekv/oncekv/internal/idemcore"
	"github.com/oncekv/oncekv/postgres"
)

// Middleware is idemhttp's Idempotency-Key middleware on a PostgreSQL
// store. It is safe for concurrent use; Wrap as many handlers as needed.
type Middleware struct {
	m httpbridge.Middleware
}

// New returns the middleware storing its records in store, configured as
// idemhttp.New is (opts is idemhttp's Options). It fails with
// idemhttp.ErrInvalidOptions when store is nil or opts is invalid.
func New(store *postgres.Store, opts *idemhttp.Options) (*Middleware, error) {
	var s idemcore.Store
	if store != nil {
		s = adapter{store}
	}
	m, err := httpbridge.New(s, opts)
	if err != nil {
		return nil, err
	}
	return &Middleware{m: m}, nil
}

// Wrap returns next behind the middleware, as idemhttp.Middleware.Wrap:
// it panics if next is nil or m was not made by New.
func (m *Middleware) Wrap(next http.Handler) http.Handler { return m.made().Wrap(next) }

// WrapCanonicalJSON is idemhttp.Middleware.WrapCanonicalJSON: Wrap for
// JSON APIs, keying a JSON body by its canonical form. It panics as Wrap
// does.
func (m *Middleware) WrapCanonicalJSON(next http.Handler) http.Handler {
	return m.made().WrapCanonicalJSON(next)
}

// made returns the middleware m wraps, panicking if m was not made by New.
func (m *Middleware) made() httpbridge.Middleware {
	if m == nil || m.m == nil {
		panic("pgidem: Wrap on a Middleware not made by New")
	}
	return m.m
}

// Stage queues fn to run in the pgx.Tx that stores r's response, so the
// handler's writes and the stored answer commit together or not at all.
// Staged functions run in the order staged, once the handler has returned
// and only if its response is stored; the first error among them stores
// nothing, releases the key and answers 500. fn must use only tx (never
// commit or roll it back) and ctx. Stage may be called from any goroutine
// until the handler returns.
//
// Errors: idemhttp.ErrNoClaim when r holds no key (or is a request of the
// embedded store's middleware); idemhttp.ErrStageClosed after the handler
// returned; idemhttp.ErrNilStage for a nil fn.
func Stage(r *http.Request, fn func(ctx context.Context, tx pgx.Tx) error) error {
	var run *idemcore.Run
	if r != nil {
		run = idemcore.FromContext(r.Context())
	}
	switch {
	case run == nil:
		return idemhttp.ErrNoClaim
	case fn == nil:
		return idemhttp.ErrNilStage
	case !run.Store().Accepts(fn):
		return fmt.Errorf("%w: its store is not PostgreSQL (use idemhttp.Stage)", idemhttp.ErrNoClaim)
	case !run.Stage(fn):
		return idemhttp.ErrStageClosed
	}
	return nil
}

// adapter is the PostgreSQL store as an idemcore.Store.
type adapter struct{ s *postgres.Store }

func (a adapter) Now() time.Time { return a.s.Now() }

func (a adapter) Retention() time.Duration { return a.s.Retention() }

func (a adapter) Accepts(w any) bool {
	_, ok := w.(func(context.Context, pgx.Tx) error)
	return ok
}

func (a adapter) Claim(ctx context.Context, req oncekv.Request, lease time.Duration) (idemcore.Claim, error) {
	c, err := a.s.Claim(ctx, req, lease)
	if err != nil {
		return nil, err
	}
	return claim{c}, nil
}

type claim struct{ *postgres.Claim }

func (c claim) Complete(ctx context.Context, response []byte, writes []any) (oncekv.Result, error) {
	var effect func(context.Context, pgx.Tx) error
	if len(writes) > 0 {
		effect = func(ctx context.Context, tx pgx.Tx) error {
			return idemcore.RunWrites(writes, func(w func(context.Context, pgx.Tx) error) error { return w(ctx, tx) })
		}
	}
	return c.Claim.Complete(ctx, response, effect)
}

func (c claim) Release(ctx context.Context, why error) error { return c.Fail(ctx, why) }

func (c claim) Forget(ctx context.Context) error { return c.Abandon(ctx) }
