package idemcore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/oncekv/oncekv"
)

// Run is a request holding its key: the handler runs under Context, may
// Stage writes and call DoNotStore from any goroutine until Close, and the
// transport ends it with Complete, Release or Forget (see the package
// doc).
type Run struct {
	p     *Protocol
	c     Claim
	ctx   context.Context
	lost  context.CancelCauseFunc
	hb    *beat
	key   string
	token uint64

	mu struct {
		sync.Mutex
		closed  bool
		writes  []any
		noStore bool
	}
}

// runKey is the context key of a Run.
type runKey struct{}

// FromContext returns the Run whose handler ctx belongs to, or nil.
func FromContext(ctx context.Context) *Run {
	r, _ := ctx.Value(runKey{}).(*Run)
	return r
}

func (p *Protocol) start(ctx context.Context, c Claim) *Run {
	r := &Run{p: p, c: c, key: c.Key(), token: c.Token()}
	r.ctx, r.lost = context.WithCancelCause(context.WithValue(ctx, runKey{}, r))
	r.hb = p.heartbeat(c, r.lost)
	return r
}

// Context is the context to run the handler under: the request's, with
// the Run in it, cancelled with the reason (oncekv.ErrFenced) if the claim
// is lost to a takeover.
func (r *Run) Context() context.Context { return r.ctx }

// Key is the claim's stable id, the idempotency key for external systems.
func (r *Run) Key() string { return r.key }

// Token is the claim's fencing token.
func (r *Run) Token() uint64 { return r.token }

// Store is the store the key is claimed in.
func (r *Run) Store() Store { return r.p.Store }

// Stage queues w, a write of the store's type (Store.Accepts), to run in
// the transaction that stores the response. It reports false once Close
// was called.
func (r *Run) Stage(w any) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return false
	}
	r.mu.writes = append(r.mu.writes, w)
	return true
}

// DoNotStore makes the answer one that is not stored: the transport then
// calls Forget. It reports false once Close was called.
func (r *Run) DoNotStore() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return false
	}
	r.mu.noStore = true
	return true
}

// Storing reports whether the answer is to be stored (no DoNotStore).
func (r *Run) Storing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.mu.noStore
}

// Close stops the heartbeat and the staging, and cancels Context; call it
// once the handler has returned, before Complete, Release or Forget.
// Calling it again is harmless.
func (r *Run) Close() {
	r.hb.stop()
	r.mu.Lock()
	r.mu.closed = true
	r.mu.Unlock()
	r.lost(nil)
}

// Complete stores response as the key's answer, with the staged writes, in
// one transaction, the context's cancellation notwithstanding (the handler
// has run; its answer is worth keeping), and returns the stored result
// (its FirstSeen dates the key's expiry). On error nothing is kept and the
// key is released; a staged write's error comes back as itself, not
// wrapped. A staged write's panic propagates, and the transport's deferred
// Release frees the key.
func (r *Run) Complete(response []byte) (oncekv.Result, error) {
	r.mu.Lock()
	writes := r.mu.writes
	r.mu.Unlock()
	res, err := r.c.Complete(context.WithoutCancel(r.ctx), response, writes)
	if err == nil {
		return res, nil
	}
	r.Release("the commit failed")
	var we *WriteError
	if errors.As(err, &we) {
		err = we.Err
	}
	return oncekv.Result{}, err
}

// Release frees the key at once, keeping nothing, so a retry runs afresh;
// why is recorded as the release's reason. A release that fails (the
// claim was lost already, or the store failed) is logged: the lease frees
// the key when it ends. Releasing twice is harmless.
func (r *Run) Release(why string) {
	err := r.c.Release(context.Background(), errors.New("oncekv: idempotency: "+why))
	if err != nil && !errors.Is(err, oncekv.ErrClaimDone) {
		r.p.Logger.Warn("idempotency: releasing a key failed; it frees itself when its lease ends", "err", err)
	}
}

// Forget drops the key's mark (after DoNotStore): the next request of the
// key runs afresh, whatever its fingerprint. If that fails, the key is
// released instead.
func (r *Run) Forget() {
	if err := r.c.Forget(context.Background()); err != nil && !errors.Is(err, oncekv.ErrClaimDone) {
		r.p.Logger.Warn("idempotency: forgetting a key failed; releasing it", "err", err)
		r.Release("the handler asked not to store its answer")
	}
}

// heartbeat extends c's lease every Heartbeat until stop. If the claim is
// lost (taken over after a stall), it cancels the handler's context with
// the reason, so the handler can stop its work.
func (p *Protocol) heartbeat(c Claim, lost context.CancelCauseFunc) *beat {
	ctx, cancel := context.WithCancel(context.Background())
	b := &beat{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		t := time.NewTicker(p.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := c.Extend(ctx, p.Lease)
			if errors.Is(err, oncekv.ErrFenced) || errors.Is(err, oncekv.ErrClaimDone) {
				lost(err)
				return
			}
			// Any other error (the store is closing, a failed write) is
			// retried at the next beat; the lease still covers it.
		}
	}()
	return b
}

// beat is a running heartbeat.
type beat struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the heartbeat and waits for it; calling it again is harmless.
func (b *beat) stop() {
	b.cancel()
	<-b.done
}
