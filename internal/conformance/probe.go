package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// asked is a probe that answers outcome (with response) and records each
// question it was asked.
type asked struct {
	outcome  oncekv.Outcome
	response []byte
	err      error
	keys     []string
	prevs    []oncekv.Attempt
}

func (a *asked) opts() *oncekv.ClaimOptions {
	return &oncekv.ClaimOptions{Probe: func(_ context.Context, key string, prev oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		a.keys, a.prevs = append(a.keys, key), append(a.prevs, prev)
		return a.outcome, a.response, a.err
	}}
}

// abandoned claims r and lets its lease run out, as a worker that died
// after its external call would: it returns the dead worker's claim.
func (e *env) abandoned(r oncekv.Request) Claim {
	e.t.Helper()
	c := e.claim(r, lease)
	e.clk.Advance(lease)
	return c
}

// testTakenOver: a claim that takes its key over from an attempt that
// recorded no outcome says so, with that attempt's token, start and the
// count of takeovers; a first claim, and one of a done key, do not.
func testTakenOver(t *testing.T, e *env) {
	r := req("pay-1")
	first := e.claim(r, lease)
	_, taken := first.TakenOver()
	require.False(t, taken, "a key's first claim")
	e.clk.Advance(lease)
	second := e.claim(r, lease)
	prev, taken := second.TakenOver()
	require.True(t, taken)
	require.Equal(t, first.Token(), prev.Token)
	require.True(t, prev.Started.Equal(start), "the first attempt started at FirstSeen: %v", prev.Started)
	require.Equal(t, 1, prev.Takeovers)
	require.Equal(t, r.Handler, prev.Handler)
	require.Equal(t, r.Key, prev.Key)
	secondAt := e.clk.Now()
	require.NoError(t, second.Fail(bg, errors.New("try again")), "released")
	third := e.claim(r, lease)
	prev, taken = third.TakenOver()
	require.True(t, taken, "a released claim is taken over at once")
	require.Equal(t, second.Token(), prev.Token)
	require.True(t, prev.Started.Equal(secondAt), "started %v, want %v", prev.Started, secondAt)
	require.Equal(t, 2, prev.Takeovers)
	res, err := third.Complete(bg, []byte("done"), nil)
	require.NoError(t, err)
	require.True(t, res.FirstSeen.Equal(start))
	done := e.claim(r, lease)
	require.True(t, done.Done())
	_, taken = done.TakenOver()
	require.False(t, taken, "a claim found done")
}

// testProbeApplied: a probe answering OutcomeApplied records the key DONE
// with its response: nothing runs again, every duplicate gets that
// response, and the dead worker's late Complete is fenced.
func testProbeApplied(t *testing.T, e *env) {
	r := req("pay-1")
	dead := e.abandoned(r)
	p := &asked{outcome: oncekv.OutcomeApplied, response: []byte("receipt 1")}
	c, err := e.s.ClaimWith(bg, r, lease, p.opts())
	require.NoError(t, err)
	require.Equal(t, []string{dead.Key()}, p.keys, "asked once, by the claim key")
	require.Equal(t, dead.Token(), p.prevs[0].Token)
	require.Equal(t, 1, p.prevs[0].Takeovers)
	require.True(t, c.Done())
	require.Equal(t, "receipt 1", string(c.Result().Response))
	require.True(t, c.Result().Duplicate)
	require.True(t, c.Result().FirstSeen.Equal(start))
	_, err = dead.Complete(bg, []byte("late"), inc("c", ""))
	require.ErrorIs(t, err, oncekv.ErrFenced)
	for range 2 {
		res, err := e.s.Apply(bg, r, inc("c", "again"))
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, "receipt 1", string(res.Response))
		d, err := e.s.ClaimWith(bg, r, lease, p.opts())
		require.NoError(t, err)
		require.True(t, d.Done())
		e.reopen()
	}
	require.Len(t, p.keys, 1, "a key found DONE runs no probe")
	require.Equal(t, 0, e.count("c"))
}

// testProbeNotApplied: OutcomeNotApplied hands the claim back, and the
// caller runs the effect once; a key's first claim asks nothing.
func testProbeNotApplied(t *testing.T, e *env) {
	p := &asked{outcome: oncekv.OutcomeNotApplied}
	first, err := e.s.ClaimWith(bg, req("fresh"), lease, p.opts())
	require.NoError(t, err)
	require.False(t, first.Done())
	require.Empty(t, p.keys, "a first attempt runs no probe")

	r := req("pay-1")
	dead := e.abandoned(r)
	c, err := e.s.ClaimWith(bg, r, lease, p.opts())
	require.NoError(t, err)
	require.Len(t, p.keys, 1)
	require.False(t, c.Done())
	require.Greater(t, c.Token(), dead.Token())
	_, err = e.s.Apply(bg, r, inc("c", "x"))
	requireInProgress(t, err, e.clk.Now().Add(lease))
	res, err := c.Complete(bg, []byte("charged"), inc("c", ""))
	require.NoError(t, err)
	require.Equal(t, "charged", string(res.Response))
	require.Equal(t, 1, e.count("c"))
	e.requireDuplicate("pay-1", "charged")
}

// testProbeError: a probe's error releases the claim, so that the next
// takeover (at once, not after a lease) probes again; an OutcomeApplied
// response over the limit is refused the same way.
func testProbeError(t *testing.T, e *env) {
	r := req("pay-1")
	e.abandoned(r)
	boom := errors.New("status API down")
	p := &asked{err: boom}
	_, err := e.s.ClaimWith(bg, r, lease, p.opts())
	require.ErrorIs(t, err, boom)
	requireRequestError(t, err, r)
	p.err, p.outcome = nil, oncekv.OutcomeNotApplied
	c, err := e.s.ClaimWith(bg, r, lease, p.opts())
	require.NoError(t, err, "released: taken over without waiting for the lease")
	require.Len(t, p.keys, 2)
	require.Equal(t, 2, p.prevs[1].Takeovers)
	require.NoError(t, c.Fail(bg, nil))

	e.h.LimitResponse(e.s, 8)
	p.outcome, p.response = oncekv.OutcomeApplied, []byte("a receipt over eight bytes")
	_, err = e.s.ClaimWith(bg, r, lease, p.opts())
	require.ErrorIs(t, err, oncekv.ErrResponseTooLarge)
	p.response = []byte("short")
	c, err = e.s.ClaimWith(bg, r, lease, p.opts())
	require.NoError(t, err, "released again")
	require.True(t, c.Done())
	e.requireDuplicate("pay-1", "short")
}

// testParked: OutcomeUnknown parks the key: every request of it gets
// ErrParked with the attempt in doubt (GiveUp), it is listed, expiry
// keeps it however long it waits, and an operator resolves it as
// applied, which makes it a duplicate from then on.
func testParked(t *testing.T, e *env) {
	r := req("pay-1")
	dead := e.abandoned(r)
	parkedAt := e.clk.Now()
	p := &asked{outcome: oncekv.OutcomeUnknown}
	_, err := e.s.ClaimWith(bg, r, lease, p.opts())
	requireParked(t, err, r, dead.Token())
	require.Len(t, p.keys, 1)
	_, err = dead.Complete(bg, []byte("late"), inc("c", ""))
	require.ErrorIs(t, err, oncekv.ErrFenced, "the attempt in doubt cannot resolve it itself")

	e.requireParkedKeys(oncekv.MarkInfo{Handler: r.Handler, Key: r.Key, Token: dead.Token(), ClaimKey: dead.Key(),
		FirstSeen: start, AttemptStarted: start, Takeovers: 1, ParkedAt: parkedAt})
	e.clk.Advance(3 * retention)
	require.GreaterOrEqual(t, e.expire().Windows, 1)
	for range 2 {
		_, err = e.s.Apply(bg, r, inc("c", "x"))
		requireParked(t, err, r, dead.Token())
		_, err = e.s.Claim(bg, r, lease)
		requireParked(t, err, r, dead.Token())
		_, err = e.s.ClaimWith(bg, r, lease, p.opts())
		requireParked(t, err, r, dead.Token())
		other := r
		other.Payload = []byte("another payload")
		_, err = e.s.Apply(bg, other, inc("c", "x"))
		require.ErrorIs(t, err, oncekv.ErrKeyReuse)
		e.reopen()
		e.clk.Advance(2 * retention)
		e.expire()
	}
	require.Len(t, p.keys, 1, "a parked key is not probed again")
	require.Len(t, e.parked(), 1, "kept across expiry and reopen")
	require.Equal(t, 0, e.count("c"))

	require.NoError(t, e.s.ResolveParked(bg, r.Handler, r.Key, true, []byte("receipt 1")))
	require.Empty(t, e.parked())
	e.requireDuplicate("pay-1", "receipt 1")
	err = e.s.ResolveParked(bg, r.Handler, r.Key, true, nil)
	require.ErrorIs(t, err, oncekv.ErrNotParked)
	requireRequestError(t, err, r)
	require.ErrorIs(t, e.s.ResolveParked(bg, r.Handler, "never-seen", false, nil), oncekv.ErrNotFound)
	require.ErrorIs(t, e.s.ResolveParked(bg, "", "k", false, nil), oncekv.ErrHandlerRequired)
	e.clk.Advance(retention)
	e.reopen()
	e.requireDuplicate("pay-1", "receipt 1")
	require.Equal(t, 0, e.count("c"))
}

// testResolveNotApplied: a parked key resolved as not applied is run
// afresh by its next delivery, with no probe.
func testResolveNotApplied(t *testing.T, e *env) {
	r := req("pay-1")
	dead := e.abandoned(r)
	p := &asked{outcome: oncekv.Outcome(200)} // no outcome of the three: parked
	_, err := e.s.ClaimWith(bg, r, lease, p.opts())
	requireParked(t, err, r, dead.Token())
	require.NoError(t, e.s.ResolveParked(bg, r.Handler, r.Key, false, nil))
	require.Empty(t, e.parked())
	c, err := e.s.ClaimWith(bg, r, lease, p.opts())
	require.NoError(t, err)
	_, taken := c.TakenOver()
	require.False(t, taken, "a fresh start")
	require.Len(t, p.keys, 1)
	_, err = c.Complete(bg, []byte("charged"), inc("c", ""))
	require.NoError(t, err)
	require.Equal(t, 1, e.count("c"))
	e.requireDuplicate("pay-1", "charged")
}

// requireParked checks that err is ErrParked of r's key, naming the
// attempt in doubt, token.
func requireParked(t *testing.T, err error, r oncekv.Request, token uint64) {
	t.Helper()
	require.ErrorIs(t, err, oncekv.ErrParked)
	var pe *oncekv.ParkedError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, token, pe.Attempt.Token)
	require.Equal(t, r.Key, pe.Attempt.Key)
	requireRequestError(t, err, r)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
}

func (e *env) parked() []oncekv.MarkInfo {
	e.t.Helper()
	marks, err := e.s.Parked(bg)
	require.NoError(e.t, err)
	return marks
}

// requireParkedKeys checks that the parked keys are want, comparing the
// fields a store keeps of a parked mark.
func (e *env) requireParkedKeys(want ...oncekv.MarkInfo) {
	e.t.Helper()
	got := e.parked()
	require.Len(e.t, got, len(want))
	for i, w := range want {
		g := got[i]
		require.Equal(e.t, oncekv.MarkParked, g.State)
		require.Equal(e.t, w.Handler, g.Handler)
		require.Equal(e.t, w.Key, g.Key)
		require.Equal(e.t, w.Token, g.Token)
		require.Equal(e.t, w.ClaimKey, g.ClaimKey)
		require.Equal(e.t, w.Takeovers, g.Takeovers)
		for _, tm := range [][2]time.Time{{w.FirstSeen, g.FirstSeen}, {w.AttemptStarted, g.AttemptStarted}, {w.ParkedAt, g.ParkedAt}} {
			require.True(e.t, tm[0].Equal(tm[1]), "got %v, want %v", tm[1], tm[0])
		}
	}
}
