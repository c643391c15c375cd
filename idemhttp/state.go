package idemhttp

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/idemcore"
)

// Errors of Stage.
var (
	// ErrNoClaim: Stage was called on a request the middleware does not
	// hold a key for (no Idempotency-Key, a method it does not cover, or a
	// request that did not pass through it). Write with DB.Update instead.
	ErrNoClaim = errors.New("oncekv: idemhttp: the request holds no idempotency key")
	// ErrStageClosed: Stage was called after the handler returned, when
	// the response's transaction is already decided.
	ErrStageClosed = errors.New("oncekv: idemhttp: the handler has returned; too late to stage a write")
	// ErrNilStage: Stage was given a nil function.
	ErrNilStage = errors.New("oncekv: idemhttp: nil staged write")
)

// runOf returns the claimed request's run, nil when r holds no key.
func runOf(r *http.Request) *idemcore.Run {
	if r == nil {
		return nil
	}
	return idemcore.FromContext(r.Context())
}

// Key returns the stable id of r's (scope, Idempotency-Key): the same on
// every retry of the request, also after a crash and a takeover, and
// different for every other caller or key. Pass it to external systems
// (a payment gateway, a mailer) as their idempotency key. It is "" when r
// holds no key (see ErrNoClaim).
func Key(r *http.Request) string {
	if run := runOf(r); run != nil {
		return run.Key()
	}
	return ""
}

// Token returns the fencing token of the claim r runs under: strictly
// greater than that of any earlier claim of the same key, so an external
// system that remembers the greatest token it has seen can refuse a late
// zombie's call. It changes at every takeover, so it is never an
// idempotency key (use Key). It is 0 when r holds no key.
func Token(r *http.Request) uint64 {
	if run := runOf(r); run != nil {
		return run.Token()
	}
	return 0
}

// Stage queues fn to run in the transaction that stores r's response, so
// the handler's writes to the store's user buckets and the stored answer
// commit together or not at all. Staged functions run in the order staged,
// once the handler has returned and only if its response is stored (see
// the package doc); the first error among them stores nothing, releases
// the key and answers 500. fn must touch nothing outside tx. Stage may be
// called from any goroutine until the handler returns.
//
// Errors: ErrNoClaim when r holds no key; ErrStageClosed after the handler
// returned; ErrNilStage for a nil fn.
func Stage(r *http.Request, fn func(tx *oncekv.Tx) error) error {
	run := runOf(r)
	switch {
	case run == nil:
		return ErrNoClaim
	case fn == nil:
		return ErrNilStage
	case !run.Store().Accepts(fn):
		return fmt.Errorf("%w: its store is not an *oncekv.DB (use its adapter's Stage)", ErrNoClaim)
	case !run.Stage(fn):
		return ErrStageClosed
	}
	return nil
}

// DoNotStore makes r's answer one that is sent and not stored, and frees
// its key as if it had never been seen: the staged writes are dropped, and
// the next request with the key, whatever its body, runs the handler
// afresh. It is for a refusal found before any effect (a body that fails
// validation, 400 or 422): Stripe stores no result for such requests, so
// a client may fix its request and send it again under the same key, and
// a relay's redrive of a message refused so gets a fresh answer. Never
// call it once the handler has had an effect outside the store: a retry
// would make it again. Call it before the handler returns, from any
// goroutine; the answer goes to the client as the handler writes it.
//
// Errors: ErrNoClaim when r holds no key; ErrStageClosed after the
// handler returned.
func DoNotStore(r *http.Request) error {
	run := runOf(r)
	switch {
	case run == nil:
		return ErrNoClaim
	case !run.DoNotStore():
		return ErrStageClosed
	}
	return nil
}
