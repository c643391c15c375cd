package idemgrpc

import (
	"context"
	"errors"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/idemcore"
)

// Errors of Stage.
var (
	// ErrNoClaim: the context is not a handler's under the interceptor
	// with a claimed key (no key was sent, or the method is not covered).
	ErrNoClaim = errors.New("idemgrpc: the call holds no key")
	// ErrStageClosed: the handler has returned; its writes are settled.
	ErrStageClosed = errors.New("idemgrpc: the handler returned; nothing more can be staged")
	// ErrNilStage: Stage was given a nil function.
	ErrNilStage = errors.New("idemgrpc: Stage of a nil function")
)

// Stage queues fn to run in the store transaction that stores the call's
// answer, so the handler's writes and the answer commit together or not at
// all. Staged functions run in the order staged, after the handler
// returned and only if its answer is stored; the first error among them
// stores nothing, releases the key and answers INTERNAL. fn must use only
// tx. Errors: ErrNoClaim, ErrStageClosed, ErrNilStage.
func Stage(ctx context.Context, fn func(tx *oncekv.Tx) error) error {
	run := idemcore.FromContext(ctx)
	switch {
	case run == nil:
		return ErrNoClaim
	case fn == nil:
		return ErrNilStage
	case !run.Stage(fn):
		return ErrStageClosed
	}
	return nil
}

// Key returns the claim's stable id for the call whose handler ctx
// belongs to: the same on every retry and takeover, the idempotency key
// to pass to external systems. ok is false outside such a handler.
func Key(ctx context.Context) (key string, ok bool) {
	if run := idemcore.FromContext(ctx); run != nil {
		return run.Key(), true
	}
	return "", false
}

// Token returns the claim's fencing token, greater at every takeover, for
// the call whose handler ctx belongs to; ok is false outside one.
func Token(ctx context.Context) (token uint64, ok bool) {
	if run := idemcore.FromContext(ctx); run != nil {
		return run.Token(), true
	}
	return 0, false
}

// DoNotStore makes the call's answer one that is not stored: the key's
// mark is dropped when the handler returns, so the next call with it runs
// afresh. Use it for a refusal found before any effect (a rate limit, a
// validation that may pass later). It reports false outside a handler
// with a claimed key or after the handler returned.
func DoNotStore(ctx context.Context) bool {
	run := idemcore.FromContext(ctx)
	return run != nil && run.DoNotStore()
}
