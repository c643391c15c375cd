package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/retry"
)

var errTransient = errors.New("connection reset")

// declined is a caller's error type, to check that errors.As still reaches
// it through the wrappers.
type declined struct{ code int }

func (d *declined) Error() string { return fmt.Sprintf("declined %d", d.code) }

// storeStyle stands for another package's permanent error (the store's
// oncekv.Permanent): it only has the method of the contract.
type storeStyle struct {
	err       error
	permanent bool
}

func (s *storeStyle) Error() string   { return s.err.Error() }
func (s *storeStyle) Unwrap() error   { return s.err }
func (s *storeStyle) Permanent() bool { return s.permanent }

func TestPermanentThroughWrapsAndJoins(t *testing.T) {
	base := &declined{code: 422}
	perm := retry.Permanent(base)
	cases := map[string]error{
		"bare":         perm,
		"wrapped":      fmt.Errorf("send order 7: %w", perm),
		"twice":        fmt.Errorf("relay: %w", fmt.Errorf("send: %w", perm)),
		"joined first": errors.Join(perm, errTransient),
		"joined last":  errors.Join(errTransient, fmt.Errorf("x: %w", perm)),
		"after":        retry.After(time.Second, perm),
		"inside after": retry.Permanent(retry.After(time.Second, base)),
		"multi %w":     fmt.Errorf("%w and %w", errTransient, perm),
	}
	for name, err := range cases {
		t.Run(name, func(t *testing.T) {
			require.True(t, retry.IsPermanent(err))
			require.ErrorIs(t, err, base)
			var d *declined
			require.ErrorAs(t, err, &d)
			require.Equal(t, 422, d.code)
		})
	}
	require.Equal(t, "declined 422", perm.Error(), "the message is the cause's")
	require.Nil(t, retry.Permanent(nil))
	require.False(t, retry.IsPermanent(nil))
	require.False(t, retry.IsPermanent(errTransient))
	require.False(t, retry.IsPermanent(fmt.Errorf("w: %w", errTransient)))
	require.False(t, retry.IsPermanent(errors.Join(errTransient, context.DeadlineExceeded)))
}

// The contract is the method, not this package's type: an error of another
// package with Permanent() bool is recognized, and one saying false is not.
func TestPermanentContractIsTheMethod(t *testing.T) {
	foreign := &storeStyle{err: errors.New("oncekv: failed permanently"), permanent: true}
	require.True(t, retry.IsPermanent(foreign))
	require.True(t, retry.IsPermanent(fmt.Errorf("apply: %w", foreign)))
	require.False(t, retry.IsPermanent(&storeStyle{err: errTransient, permanent: false}))

	r := newRetrier(t, 1, retry.Policy{})
	now := time.Unix(1_700_000_000, 0)
	d := r.Decide(context.Background(), 1, fmt.Errorf("apply: %w", foreign), now)
	require.Equal(t, retry.ReasonPermanent, d.Reason)
	require.True(t, d.DeadLetter())

	// And the other way round: this package's mark has the method, so the
	// store (or anyone) can test for it without importing retry.
	var p interface{ Permanent() bool }
	require.True(t, errors.As(retry.Permanent(errTransient), &p))
	require.True(t, p.Permanent())
}

// retryLater is another package's error carrying a Retry-After.
type retryLater time.Duration

func (r retryLater) Error() string             { return "busy" }
func (r retryLater) RetryAfter() time.Duration { return time.Duration(r) }

func TestAfterCarriesRetryAfterThroughChains(t *testing.T) {
	base := &declined{code: 503}
	err := retry.After(30*time.Second, base)
	require.Equal(t, "declined 503", err.Error())
	for name, e := range map[string]error{
		"bare":      err,
		"wrapped":   fmt.Errorf("send: %w", err),
		"joined":    errors.Join(errTransient, err),
		"permanent": retry.Permanent(err),
	} {
		t.Run(name, func(t *testing.T) {
			d, ok := retry.RetryAfter(e)
			require.True(t, ok)
			require.Equal(t, 30*time.Second, d)
			require.ErrorIs(t, e, base)
			var de *declined
			require.ErrorAs(t, e, &de)
		})
	}

	// Several in one tree: the longest wins, wherever it is.
	joined := errors.Join(retry.After(time.Second, errTransient), fmt.Errorf("w: %w", retry.After(time.Minute, base)), retry.After(2*time.Second, base))
	d, ok := retry.RetryAfter(joined)
	require.True(t, ok)
	require.Equal(t, time.Minute, d)
	// Nested: the outer one does not hide a longer inner one.
	d, ok = retry.RetryAfter(retry.After(time.Second, retry.After(time.Hour, base)))
	require.True(t, ok)
	require.Equal(t, time.Hour, d)

	// Another package's type with the method counts.
	d, ok = retry.RetryAfter(fmt.Errorf("w: %w", retryLater(9*time.Second)))
	require.True(t, ok)
	require.Equal(t, 9*time.Second, d)

	// Zero is a Retry-After too ("retry now"); negative counts as zero.
	d, ok = retry.RetryAfter(retry.After(0, base))
	require.True(t, ok)
	require.Zero(t, d)
	d, ok = retry.RetryAfter(retry.After(-time.Hour, base))
	require.True(t, ok)
	require.Zero(t, d)

	require.Nil(t, retry.After(time.Second, nil))
	d, ok = retry.RetryAfter(errTransient)
	require.False(t, ok)
	require.Zero(t, d)
	_, ok = retry.RetryAfter(nil)
	require.False(t, ok)
}
