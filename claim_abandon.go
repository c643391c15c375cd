package oncekv

import (
	"context"

	"github.com/oncekv/oncekv/internal/layout"
)

// Abandon ends the claim and drops its key's mark, as if the key had never
// been seen: the next Claim or Apply of the key runs afresh, with any
// payload. It is for work that found, before any effect, that the request
// cannot be done as sent (a validation failure): nothing about it is worth
// keeping, so a client may correct its request and send it again under the
// same key (Stripe keeps no result for such requests). After an effect,
// Abandon would let a retry make it again: use Complete or Fail then.
//
// Errors: ErrFenced once another worker has taken the key over (nothing is
// changed); ErrClaimDone after Complete, Fail or Abandon; ctx's error;
// ErrClosed.
func (c *Claim) Abandon(ctx context.Context) error {
	return c.wrap(c.run(func() error {
		err := c.updateLocked(ctx, outcomeNone, nil, nil, func(w *writeTx, _ *op, m *layout.FoundMark) error {
			return w.deleteMark(m.Window, c.mkey)
		})
		if err == nil {
			c.mu.state = claimReleased
		}
		return err
	}))
}
