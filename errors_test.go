package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// leaseTeller is the interface another package (the queue, the HTTP
// middleware) relies on to learn when to come back; it must keep matching.
type leaseTeller interface{ LeaseUntil() time.Time }

var _ leaseTeller = (*oncekv.InProgressError)(nil)

// TestInProgressSaysWhenToComeBack: every path that answers ErrInProgress
// (Apply, Claim, Forget) gives an *InProgressError carrying the live
// claim's lease end, by the store's clock.
func TestInProgressSaysWhenToComeBack(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	c := mustClaim(t, db, welcome)
	clock.Advance(10 * time.Second)

	_, applyErr := db.Apply(ctx, welcome, mustNotApply(t))
	_, claimErr := db.Claim(ctx, welcome, lease)
	forgetErr := db.Forget(welcome.Handler, welcome.Key)
	for name, err := range map[string]error{"apply": applyErr, "claim": claimErr, "forget": forgetErr} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, err, oncekv.ErrInProgress)
			var ipe *oncekv.InProgressError
			require.ErrorAs(t, err, &ipe)
			require.Equal(t, claimEpoch.Add(lease), ipe.LeaseUntil())
			require.Equal(t, c.LeaseUntil(), ipe.LeaseUntil())
			require.Equal(t, lease-10*time.Second, ipe.RetryAfter(db.Now()))
			require.Zero(t, ipe.RetryAfter(ipe.LeaseUntil().Add(time.Second)), "never negative")
			var lt leaseTeller
			require.ErrorAs(t, err, &lt, "found through the interface, as other packages look for it")
			require.Contains(t, err.Error(), "oncekv: ")
		})
	}

	// An extension moves the answer on.
	require.NoError(t, c.Extend(ctx, time.Minute))
	_, err := db.Apply(ctx, welcome, mustNotApply(t))
	var ipe *oncekv.InProgressError
	require.ErrorAs(t, err, &ipe)
	require.Equal(t, db.Now().Add(time.Minute), ipe.LeaseUntil())
}

// gatewayRejected is a permanent error of some other package that knows
// nothing of oncekv: it only has the Permanent() bool method.
type gatewayRejected struct{ permanent bool }

func (g gatewayRejected) Error() string {
	return fmt.Sprintf("gateway said 400 (permanent=%v)", g.permanent)
}
func (g gatewayRejected) Permanent() bool { return g.permanent }

// TestPermanentIsAContract: IsPermanent recognises any error in the chain
// with a Permanent() bool method returning true, and oncekv's own permanent
// error has that method, so packages that cannot import oncekv (retry)
// agree with it both ways.
func TestPermanentIsAContract(t *testing.T) {
	base := errors.New("bad card")
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"nil":                    {nil, false},
		"plain":                  {base, false},
		"oncekv.Permanent":       {oncekv.Permanent(base), true},
		"wrapped Permanent":      {fmt.Errorf("charge: %w", oncekv.Permanent(base)), true},
		"foreign permanent":      {gatewayRejected{true}, true},
		"wrapped foreign":        {fmt.Errorf("charge: %w", gatewayRejected{true}), true},
		"foreign not permanent":  {gatewayRejected{false}, false},
		"joined, one permanent":  {errors.Join(base, fmt.Errorf("x: %w", gatewayRejected{true})), true},
		"false before true":      {fmt.Errorf("%w: %w", gatewayRejected{false}, gatewayRejected{true}), true},
		"false wrapping nothing": {fmt.Errorf("outer: %w", gatewayRejected{false}), false},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, oncekv.IsPermanent(tc.err))
		})
	}

	// The other side's view: oncekv's permanent error answers the method.
	var p interface{ Permanent() bool }
	require.ErrorAs(t, oncekv.Permanent(base), &p)
	require.True(t, p.Permanent())
	require.ErrorIs(t, oncekv.Permanent(base), base)
}

// TestForeignPermanentIsRecorded: an effect failing with another package's
// permanent error is recorded FAILED and replayed, as with Permanent.
func TestForeignPermanentIsRecorded(t *testing.T) {
	db, _ := openClocked(t)
	ctx := context.Background()
	req := oncekv.Request{Handler: "charge", Key: "order-1"}
	_, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) {
		return nil, fmt.Errorf("charge: %w", gatewayRejected{true})
	})
	require.ErrorIs(t, err, oncekv.ErrFailed)
	var g gatewayRejected
	require.ErrorAs(t, err, &g, "the call that failed keeps the original error")
	_, err = db.Apply(ctx, req, mustNotApply(t))
	require.ErrorIs(t, err, oncekv.ErrFailed)

	// Permanent() false is a transient error: nothing is recorded.
	req.Key = "order-2"
	_, err = db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return nil, gatewayRejected{false} })
	require.NotErrorIs(t, err, oncekv.ErrFailed)
	res, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return []byte("ok"), nil })
	require.NoError(t, err)
	require.False(t, res.Duplicate)
}
