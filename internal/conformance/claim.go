package conformance

import (
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

const lease = time.Minute

func (e *env) claim(r oncekv.Request, d time.Duration) Claim {
	e.t.Helper()
	c, err := e.s.Claim(bg, r, d)
	require.NoError(e.t, err)
	return c
}

// requireInProgress checks that err is ErrInProgress until the lease end
// until.
func requireInProgress(t *testing.T, err error, until time.Time) {
	t.Helper()
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	var ipe *oncekv.InProgressError
	require.ErrorAs(t, err, &ipe)
	require.True(t, ipe.LeaseUntil().Equal(until), "lease until %v, want %v", ipe.LeaseUntil(), until)
	adv := oncekv.Classify(err)
	require.Equal(t, oncekv.RetryLater, adv.Action)
	require.True(t, adv.NotBefore.Equal(until))
}

// testClaimComplete: a claim holds the key until it completes; then the
// key is done with the claim's response.
func testClaimComplete(t *testing.T, e *env) {
	r := req("pay-1")
	c := e.claim(r, lease)
	require.False(t, c.Done())
	require.NotZero(t, c.Token())
	until := start.Add(lease)
	require.True(t, c.LeaseUntil().Equal(until), "lease until %v", c.LeaseUntil())
	_, err := e.s.Apply(bg, r, inc("c", "x"))
	requireInProgress(t, err, until)
	_, err = e.s.Claim(bg, r, lease)
	requireInProgress(t, err, until)
	requireRequestError(t, err, r)
	e.clk.Advance(time.Second)
	res, err := c.Complete(bg, []byte("charged"), inc("c", ""))
	require.NoError(t, err)
	require.Equal(t, "charged", string(res.Response))
	require.True(t, res.FirstSeen.Equal(start))
	require.True(t, c.Done())
	require.True(t, c.LeaseUntil().IsZero())
	require.Equal(t, 1, e.count("c"), "Complete's effect committed with the mark")
	for range 2 {
		res, err = e.s.Apply(bg, r, inc("c", "x"))
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, "charged", string(res.Response))
		d := e.claim(r, lease)
		require.True(t, d.Done())
		require.Zero(t, d.Token())
		require.Equal(t, "charged", string(d.Result().Response))
		require.True(t, d.Result().Duplicate)
		e.reopen()
	}
	require.Equal(t, 1, e.count("c"))
	other := r
	other.Payload = []byte("other")
	_, err = e.s.Claim(bg, other, lease)
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	_, err = e.s.Claim(bg, req("zero"), 0)
	require.ErrorIs(t, err, oncekv.ErrInvalidLease)
}

// goldenClaimKey is Claim.Key of ("billing", "order-7"): the SHA-256 of
// its mark key, the same in every store, on every host.
const goldenClaimKey = "4494f426c42b918415b48eab8b9a0aafa0e090381ba5c956d7b2f66cf1da6263"

// testClaimKey: the key handed to external systems is fixed by (handler,
// key) alone.
func testClaimKey(t *testing.T, e *env) {
	r := oncekv.Request{Handler: "billing", Key: "order-7"}
	c := e.claim(r, lease)
	require.Equal(t, goldenClaimKey, c.Key())
	e.clk.Advance(2 * lease)
	d := e.claim(r, lease)
	require.Equal(t, goldenClaimKey, d.Key(), "the same after a takeover")
	require.Greater(t, d.Token(), c.Token())
	_, err := d.Complete(bg, nil, nil)
	require.NoError(t, err)
	e.reopen()
	require.Equal(t, goldenClaimKey, e.claim(r, lease).Key(), "and for a claim of a done key")
	other := e.claim(oncekv.Request{Handler: "billin", Key: "gorder-7"}, lease)
	require.NotEqual(t, goldenClaimKey, other.Key())
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{64}$`), other.Key())
}

// testTakeover: once a lease ran out, another claim takes the key over
// with a greater token, and the old holder is fenced off: its Extend,
// Complete and Fail change nothing.
func testTakeover(t *testing.T, e *env) {
	r := req("pay-1")
	old := e.claim(r, lease)
	e.clk.Advance(lease) // the lease ends at this instant
	taker := e.claim(r, lease)
	require.Greater(t, taker.Token(), old.Token())
	_, err := old.Complete(bg, []byte("late"), inc("c", ""))
	require.ErrorIs(t, err, oncekv.ErrFenced)
	var fe *oncekv.FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, taker.Token(), fe.Stored)
	require.Equal(t, old.Token(), fe.Presented)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
	require.Equal(t, 0, e.count("c"), "the zombie's effect did not commit")
	require.ErrorIs(t, old.Extend(bg, lease), oncekv.ErrFenced)
	require.ErrorIs(t, old.Fail(bg, errors.New("x")), oncekv.ErrFenced)
	require.True(t, old.LeaseUntil().IsZero())
	_, err = e.s.Apply(bg, r, inc("c", "x"))
	requireInProgress(t, err, e.clk.Now().Add(lease))
	res, err := taker.Complete(bg, []byte("charged"), inc("c", ""))
	require.NoError(t, err)
	require.True(t, res.FirstSeen.Equal(start), "a takeover keeps the first-seen time")
	res, err = e.s.Apply(bg, r, inc("c", "x"))
	require.NoError(t, err)
	require.Equal(t, "charged", string(res.Response))
	require.Equal(t, 1, e.count("c"))
}

// testApplyTakeover: an Apply after the lease ran out runs the effect
// itself, and the old holder is fenced off.
func testApplyTakeover(t *testing.T, e *env) {
	r := req("pay-1")
	old := e.claim(r, lease)
	e.clk.Advance(2 * lease)
	res, err := e.s.Apply(bg, r, inc("c", "applied"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.True(t, res.FirstSeen.Equal(start))
	_, err = old.Complete(bg, []byte("late"), inc("c", ""))
	require.ErrorIs(t, err, oncekv.ErrFenced)
	var fe *oncekv.FenceError
	require.ErrorAs(t, err, &fe)
	require.Greater(t, fe.Stored, old.Token())
	res, err = e.s.Apply(bg, r, inc("c", "x"))
	require.NoError(t, err)
	require.Equal(t, "applied", string(res.Response))
	require.Equal(t, 1, e.count("c"))
}

// testFail: a transient failure releases the key at once; a permanent one
// records it.
func testFail(t *testing.T, e *env) {
	r := req("pay-1")
	c := e.claim(r, lease)
	require.NoError(t, c.Fail(bg, errors.New("gateway 503")))
	require.ErrorIs(t, c.Fail(bg, nil), oncekv.ErrClaimDone)
	d := e.claim(r, lease) // at once, no waiting for the lease
	require.False(t, d.Done())
	require.Greater(t, d.Token(), c.Token())
	require.NoError(t, d.Fail(bg, oncekv.Permanent(errors.New("card declined"))))
	for range 2 {
		_, err := e.s.Apply(bg, r, inc("c", "x"))
		require.ErrorIs(t, err, oncekv.ErrFailed)
		var fe *oncekv.FailedError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "card declined", fe.Message)
		_, err = e.s.Claim(bg, r, lease)
		require.ErrorIs(t, err, oncekv.ErrFailed)
		e.reopen()
	}
	released := e.claim(req("released"), lease)
	require.NoError(t, released.Fail(bg, nil))
	res, err := e.s.Apply(bg, req("released"), inc("c", "ok"))
	require.NoError(t, err, "a released key applies at once")
	require.False(t, res.Duplicate)
	require.Equal(t, 1, e.count("c"))
}

// testCompleteEffectError: an error of Complete's effect writes nothing and
// leaves the claim holding the key; a permanent one records FAILED.
func testCompleteEffectError(t *testing.T, e *env) {
	r := req("pay-1")
	c := e.claim(r, lease)
	boom := errors.New("disk of the receipts full")
	_, err := c.Complete(bg, []byte("x"), &Effect{Counter: "c", Err: boom})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 0, e.count("c"))
	require.False(t, c.Done())
	_, err = e.s.Apply(bg, r, inc("c", "x"))
	require.ErrorIs(t, err, oncekv.ErrInProgress, "the claim still holds the key")
	e.h.LimitResponse(e.s, 10)
	_, err = c.Complete(bg, make([]byte, 11), nil)
	require.ErrorIs(t, err, oncekv.ErrResponseTooLarge)
	res, err := c.Complete(bg, []byte("ok"), inc("c", ""))
	require.NoError(t, err)
	require.Equal(t, "ok", string(res.Response))
	require.Equal(t, 1, e.count("c"))

	p := e.claim(req("pay-2"), lease)
	_, err = p.Complete(bg, []byte("x"), &Effect{Counter: "c", Err: oncekv.Permanent(errors.New("refused"))})
	require.ErrorIs(t, err, oncekv.ErrFailed)
	_, err = e.s.Apply(bg, req("pay-2"), inc("c", "x"))
	require.ErrorIs(t, err, oncekv.ErrFailed)
	require.Equal(t, 1, e.count("c"))
}

// testClaimDone: a claim that completed holds nothing any more.
func testClaimDone(t *testing.T, e *env) {
	c := e.claim(req("pay-1"), lease)
	_, err := c.Complete(bg, []byte("ok"), nil)
	require.NoError(t, err)
	require.ErrorIs(t, c.Extend(bg, lease), oncekv.ErrClaimDone)
	_, err = c.Complete(bg, []byte("again"), nil)
	require.ErrorIs(t, err, oncekv.ErrClaimDone)
	require.ErrorIs(t, c.Fail(bg, nil), oncekv.ErrClaimDone)
	require.Equal(t, "ok", string(c.Result().Response))
}

// testExtend: Extend moves the lease on from the store's now.
func testExtend(t *testing.T, e *env) {
	r := req("pay-1")
	c := e.claim(r, lease)
	e.clk.Advance(lease / 2)
	require.NoError(t, c.Extend(bg, 3*lease))
	until := start.Add(lease/2 + 3*lease)
	require.True(t, c.LeaseUntil().Equal(until))
	e.clk.Advance(2 * lease) // past the first lease, within the second
	_, err := e.s.Claim(bg, r, lease)
	requireInProgress(t, err, until)
	require.ErrorIs(t, c.Extend(bg, 0), oncekv.ErrInvalidLease)
	require.ErrorIs(t, c.Extend(bg, -time.Second), oncekv.ErrInvalidLease)
	res, err := c.Complete(bg, []byte("late but held"), nil)
	require.NoError(t, err, "past nothing: still the holder")
	require.Equal(t, "late but held", string(res.Response))

	// Past its lease, a holder nobody took over still completes: the
	// token, not the clock, decides.
	d := e.claim(req("pay-2"), lease)
	e.clk.Advance(10 * lease)
	_, err = d.Complete(bg, []byte("ok"), nil)
	require.NoError(t, err)
}

// testClaimReopen: what happens to a claim held when the store is opened
// again is one of the differences.
func testClaimReopen(t *testing.T, e *env) {
	r := req("pay-1")
	c := e.claim(r, lease)
	e.reopen()
	d, err := e.s.Claim(bg, r, lease)
	switch e.h.Kind {
	case Embedded:
		require.NoError(t, err, "the embedded store released the orphaned claim at Open")
		require.Greater(t, d.Token(), c.Token())
	case Shared:
		requireInProgress(t, err, start.Add(lease))
		e.clk.Advance(lease)
		d = e.claim(r, lease)
		require.Greater(t, d.Token(), c.Token())
	}
	_, err = d.Complete(bg, []byte("ok"), nil)
	require.NoError(t, err)
}
