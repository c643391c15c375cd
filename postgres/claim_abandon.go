package postgres

import (
	"context"
)

// Abandon ends the claim and drops its key's mark, as if the key had never
// been seen, as oncekv.Claim.Abandon does on the embedded store: the next
// Claim or Apply of the key, on any host, runs afresh with any payload. It
// is for work that found, before any effect, that the request cannot be
// done as sent (a validation failure). After an effect, Abandon would let
// a retry make it again: use Complete or Fail then. A later claim of the
// key still gets a greater token (they come from the schema's sequence),
// and this claim's zombie calls get oncekv.ErrFenced.
//
// Errors: oncekv.ErrFenced once another worker took the key over (nothing
// changed); oncekv.ErrClaimDone after Complete, Fail or Abandon; ctx's
// error; oncekv.ErrClosed.
func (c *Claim) Abandon(ctx context.Context) error {
	return c.wrap(c.run(func() error {
		err := c.updateLocked(ctx, outcomeNone, nil, nil, func(_ *writes, m *mark) {
			m.state = stateGone
		})
		if err == nil {
			c.mu.state = claimReleased
		}
		return err
	}))
}
