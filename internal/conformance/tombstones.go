package conformance

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// testTombstones: with TombstoneRetention, a DONE or FAILED key whose
// window is past Retention is still suppressed, with ResponseExpired and
// no response (and no fingerprint: another payload is not key reuse),
// across a reopen, until TombstoneRetention after its window's end; an
// expired claim leaves none. Then the key applies afresh.
func testTombstones(t *testing.T, e *env) {
	tombs := 3 * retention
	e.cfg.TombstoneRetention = tombs
	e.reopen()
	_, err := e.s.Apply(bg, req("t-done"), inc("c", "first"))
	require.NoError(t, err)
	bad := errors.New("card declined")
	_, err = e.s.Apply(bg, req("t-failed"), &Effect{Counter: "c", Err: oncekv.Permanent(bad)})
	require.ErrorIs(t, err, oncekv.ErrFailed)
	e.claim(req("t-claim"), lease)
	e.clk.Advance(expiresAt.Sub(start))
	require.GreaterOrEqual(t, e.expire().Windows, 1)

	res, err := e.s.Apply(bg, req("t-claim"), inc("claims", "applied"))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "an expired claim leaves no tombstone")
	for range 2 {
		e.requireTombstone(req("t-done"))
		other := req("t-done")
		other.Payload = []byte("another payload")
		e.requireTombstone(other)
		res, err := e.s.Apply(bg, req("t-failed"), inc("c", "x"))
		require.ErrorIs(t, err, oncekv.ErrFailed)
		require.True(t, res.ResponseExpired)
		require.True(t, res.Duplicate)
		rs, err := e.s.ApplyBatch(bg, []oncekv.Request{req("t-done"), req("t-failed")}, func(int) *Effect { return inc("c", "x") })
		require.NoError(t, err)
		require.NoError(t, rs[0].Err)
		require.True(t, rs[0].ResponseExpired, "in a batch too")
		require.ErrorIs(t, rs[1].Err, oncekv.ErrFailed)
		require.True(t, rs[1].ResponseExpired)
		c := e.claim(req("t-done"), lease)
		require.True(t, c.Done())
		require.True(t, c.Result().ResponseExpired)
		require.Nil(t, c.Result().Response)
		e.reopen()
	}
	require.Equal(t, 1, e.count("c"), "no effect ran again")

	tombsEnd := start.Truncate(span).Add(span + tombs)
	e.clk.Advance(tombsEnd.Sub(e.clk.Now()) - time.Nanosecond)
	e.expire()
	e.requireTombstone(req("t-done"))
	e.clk.Advance(time.Nanosecond)
	e.expire()
	res, err = e.s.Apply(bg, req("t-done"), inc("c", "second"))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "past TombstoneRetention the key applies afresh")
	require.Equal(t, 2, e.count("c"))
	e.requireDuplicate("t-done", "second")
}

// requireTombstone checks that r is suppressed by a tombstone: a
// duplicate whose response expired, first seen at the suite's start (to
// the minute: a tombstone may keep no finer).
func (e *env) requireTombstone(r oncekv.Request) {
	e.t.Helper()
	res, err := e.s.Apply(bg, r, inc("c", "again"))
	require.NoError(e.t, err)
	require.True(e.t, res.Duplicate)
	require.True(e.t, res.ResponseExpired)
	require.Nil(e.t, res.Response)
	require.WithinDuration(e.t, start, res.FirstSeen, time.Minute)
}
