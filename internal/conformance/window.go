package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// expiresAt is when the window holding a mark first seen at start
// expires: the end of its window plus the retention.
var expiresAt = start.Truncate(span).Add(span + retention)

func (e *env) expire() oncekv.ExpireStats {
	e.t.Helper()
	st, err := e.s.Expire(bg)
	require.NoError(e.t, err)
	return st
}

func (e *env) requireDuplicate(key string, resp string) {
	e.t.Helper()
	res, err := e.s.Apply(bg, req(key), inc("c", "again"))
	require.NoError(e.t, err)
	require.True(e.t, res.Duplicate, "%s is still deduplicated at %v", key, e.clk.Now())
	require.Equal(e.t, resp, string(res.Response))
}

// testRetention: a key is deduplicated for at least the retention, also
// across a reopen; once its window expired and Expire ran, it applies
// again.
func testRetention(t *testing.T, e *env) {
	_, err := e.s.Apply(bg, req("o-1"), inc("c", "first"))
	require.NoError(t, err)
	e.clk.Advance(expiresAt.Sub(start) - time.Nanosecond)
	require.Zero(t, e.expire().Windows)
	e.requireDuplicate("o-1", "first")
	e.reopen()
	require.Zero(t, e.expire().Windows)
	e.requireDuplicate("o-1", "first")
	e.clk.Advance(time.Nanosecond)
	require.GreaterOrEqual(t, e.expire().Windows, 1)
	res, err := e.s.Apply(bg, req("o-1"), inc("c", "second"))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "a retry after the window applies again")
	require.Equal(t, 2, e.count("c"))
	require.Zero(t, e.expire().Windows, "expiry again drops nothing")
	e.requireDuplicate("o-1", "second")
}

// testLeaseKeepsWindow: a window holding a claim whose lease runs past
// the retention is kept until the lease ends, and so are the windows
// after it.
func testLeaseKeepsWindow(t *testing.T, e *env) {
	long := 3 * retention
	c := e.claim(req("slow"), long)
	e.clk.Advance(span)
	_, err := e.s.Apply(bg, req("next"), inc("c", "next"))
	require.NoError(t, err)
	e.clk.Advance(expiresAt.Sub(start) + 2*span)
	e.expire()
	_, err = e.s.Apply(bg, req("slow"), inc("c", "x"))
	require.ErrorIs(t, err, oncekv.ErrInProgress, "the claim's window was kept")
	e.requireDuplicate("next", "next")
	e.clk.Advance(long)
	require.GreaterOrEqual(t, e.expire().Windows, 2)
	res, err := e.s.Apply(bg, req("slow"), inc("c", "slow"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	_, err = c.Complete(bg, []byte("late"), nil)
	require.ErrorIs(t, err, oncekv.ErrFenced)
	res, err = e.s.Apply(bg, req("next"), inc("c", "next again"))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "the window after it expired with it")
}

// testCompleteKeepsRetention: a claim completed long after it was taken
// is deduplicated for the retention from its completion.
func testCompleteKeepsRetention(t *testing.T, e *env) {
	c := e.claim(req("slow"), 2*retention)
	e.clk.Advance(retention + 2*span)
	_, err := c.Complete(bg, []byte("done"), nil)
	require.NoError(t, err)
	e.clk.Advance(retention - span)
	e.expire()
	e.requireDuplicate("slow", "done")
	e.reopen()
	e.requireDuplicate("slow", "done")
}

// testClockBack: a clock stepped back neither revives a lease that ran
// out nor moves the store's time back, also across a reopen.
func testClockBack(t *testing.T, e *env) {
	old := e.claim(req("pay-1"), lease)
	e.clk.Advance(2 * lease)
	seen := e.s.Now()
	e.clk.Advance(-10 * lease)
	require.False(t, e.s.Now().Before(seen), "the store's time never goes back")
	taker := e.claim(req("pay-1"), lease)
	require.Greater(t, taker.Token(), old.Token())
	_, err := taker.Complete(bg, []byte("ok"), nil)
	require.NoError(t, err)

	e.clk.Advance(10 * lease)
	e.claim(req("pay-2"), lease)
	e.clk.Advance(2 * lease)
	e.s.Now()
	e.reopen()
	e.clk.Advance(-10 * lease)
	d := e.claim(req("pay-2"), lease)
	require.False(t, d.Done(), "the lease that ran out before the reopen stays run out")
}

// testWindowSpanFixed: a store keeps the window span it was created with.
func testWindowSpanFixed(t *testing.T, e *env) {
	_, err := e.s.Apply(bg, req("o-1"), inc("c", "first"))
	require.NoError(t, err)
	cfg := e.cfg
	cfg.WindowSpan = 2 * span
	_, err = e.h.Reopen(t, e.s, cfg)
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	require.Contains(t, err.Error(), "WindowSpan")
	cfg.WindowSpan = 0
	s, err := e.h.Reopen(t, e.s, cfg)
	require.NoError(t, err, "zero means the store's")
	e.s = s
	e.requireDuplicate("o-1", "first")
}
