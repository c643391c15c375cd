package postgres

import (
	"bytes"
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/oncekv/oncekv"
)

// effectTx is the transaction an effect gets: the store's, whose Commit
// and Rollback belong to the store (see ErrEffectTx).
type effectTx struct{ pgx.Tx }

// Commit does nothing and returns ErrEffectTx.
func (effectTx) Commit(context.Context) error { return ErrEffectTx }

// Rollback does nothing and returns ErrEffectTx.
func (effectTx) Rollback(context.Context) error { return ErrEffectTx }

// effectResult is what an effect returned, and what the store learnt by
// looking into its error.
type effectResult struct {
	resp      []byte // a copy: the effect may reuse its slice
	err       error
	permanent bool   // err was marked with oncekv.Permanent
	msg       string // err's message, for a FAILED mark
}

// callEffect runs o's effect in tx. A panic of the effect, or of the
// methods of the error it returned, is recorded in o.panicVal for the
// caller to raise again once the other requests are settled. A
// runtime.Goexit unwinds through the caller's defers, which roll the
// transaction back.
func callEffect(ctx context.Context, tx pgx.Tx, o *op) (r effectResult) {
	if o.effect == nil {
		return r
	}
	returned := false
	defer func() {
		if !returned {
			if p := recover(); p != nil {
				o.panicVal = p
			}
		}
	}()
	resp, err := o.effect(ctx, effectTx{tx})
	if err != nil {
		r.err, r.permanent = err, oncekv.IsPermanent(err)
		if r.permanent {
			r.msg = err.Error()
		}
	}
	if resp != nil {
		r.resp = bytes.Clone(resp)
	}
	returned = true
	return r
}
