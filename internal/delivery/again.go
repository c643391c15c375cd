package delivery

import (
	"context"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/retry"
)

// Again decides about a delivery whose effect or request failed with err
// (not nil), by oncekv.Classify and then r: retried after the returned
// delay (true), or given up on (false).
//
//   - GiveUp (a permanent failure, key reuse, bad input): given up on.
//   - RetryLater with a NotBefore (a live claim holds the key): retried
//     once the holder's lease ends, capped by maxWait when it is positive,
//     and no attempt counted: it is not the delivery's failure.
//   - Anything else: r.Decide for attempt() (called only then, so a
//     caller counting failures counts this one): retried after its delay
//     unless it dead-letters (permanent, attempts spent). ctx's own end
//     (retry.ReasonCanceled) retries at once: nothing is wrong with the
//     delivery.
func Again(ctx context.Context, err error, now time.Time, r *retry.Retrier, attempt func() int, maxWait time.Duration) (time.Duration, bool) {
	adv := oncekv.Classify(err)
	switch {
	case adv.Action == oncekv.GiveUp:
		return 0, false
	case adv.Action == oncekv.RetryLater && !adv.NotBefore.IsZero():
		wait := max(adv.NotBefore.Sub(now), 0)
		if maxWait > 0 {
			wait = min(wait, maxWait)
		}
		return wait, true
	}
	d := r.Decide(ctx, attempt(), err, now)
	return d.Delay, !d.DeadLetter()
}
