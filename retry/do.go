package retry

import (
	"cmp"
	"context"
)

// Do calls fn until it succeeds or Decide gives up, waiting each decision's
// Delay in between with p.Sleep, which returns early when ctx is done. fn
// gets ctx and the attempt's number, from 1. With p.Budget set, the first
// call is recorded as a first attempt and each retry must be allowed by the
// budget.
//
// It returns nil on success, the error of New for a bad p (fn is then never
// called), and otherwise a *GiveUpError wrapping the last attempt's error
// and saying why it stopped. When ctx is already done, fn is not called; a
// nil ctx is never done.
func Do(ctx context.Context, p *Policy, fn func(ctx context.Context, attempt int) error) error {
	r, err := New(p)
	if err != nil {
		return err
	}
	return r.Do(ctx, fn)
}

// Do is the package-level Do with r's policy.
func (r *Retrier) Do(ctx context.Context, fn func(ctx context.Context, attempt int) error) error {
	if ctx == nil {
		ctx = context.Background() // as Decide reads a nil ctx: never done
	}
	if err := ctx.Err(); err != nil {
		return &GiveUpError{Reason: ReasonCanceled, Err: err, ctxErr: err}
	}
	if r.p.Budget != nil {
		r.p.Budget.Attempt()
	}
	for attempt := 1; ; attempt++ {
		cause := fn(ctx, attempt)
		d := r.Decide(ctx, attempt, cause, r.p.Now())
		switch d.Reason {
		case ReasonSucceeded:
			return nil
		case ReasonRetry:
			// A Sleep that returned nil although ctx is done must not
			// start another attempt.
			if err := cmp.Or(r.p.Sleep(ctx, d.Delay), ctx.Err()); err != nil {
				return &GiveUpError{Reason: ReasonCanceled, Attempts: attempt, Err: cause, ctxErr: err}
			}
		default:
			return &GiveUpError{Reason: d.Reason, Attempts: attempt, Err: cause, ctxErr: ctx.Err()}
		}
	}
}
