package conformance

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// testBatch: each request of a batch gets the result Apply would give it,
// and a failing effect costs only its own request.
func testBatch(t *testing.T, e *env) {
	_, err := e.s.Apply(bg, req("old"), inc("c", "old"))
	require.NoError(t, err)
	boom, bad := errors.New("timeout"), errors.New("declined")
	reuse := req("old")
	reuse.Payload = []byte("other")
	reqs := []oncekv.Request{
		req("a"), req("b"), req("a"), {Handler: "orders"}, req("old"), reuse, req("flaky"), req("declined"), req("c"),
	}
	var calls atomic.Int32
	effects := []*Effect{
		inc("c", "a"), inc("c", "b"), inc("c", "a again"), inc("c", "x"), inc("c", "x"), inc("c", "x"),
		{Counter: "c", Err: boom}, {Counter: "c", Err: oncekv.Permanent(bad)}, inc("c", "c"),
	}
	rs, err := e.s.ApplyBatch(bg, reqs, func(i int) *Effect {
		calls.Add(1)
		return effects[i]
	})
	require.NoError(t, err)
	require.Len(t, rs, len(reqs))
	ok := func(i int, resp string, dup bool) {
		t.Helper()
		require.NoError(t, rs[i].Err, "request %d", i)
		require.Equal(t, resp, string(rs[i].Response), "request %d", i)
		require.Equal(t, dup, rs[i].Duplicate, "request %d", i)
	}
	ok(0, "a", false)
	ok(1, "b", false)
	ok(2, "a", true) // a duplicate within the batch
	require.ErrorIs(t, rs[3].Err, oncekv.ErrKeyRequired)
	ok(4, "old", true)
	require.ErrorIs(t, rs[5].Err, oncekv.ErrKeyReuse)
	require.ErrorIs(t, rs[6].Err, boom)
	require.ErrorIs(t, rs[7].Err, oncekv.ErrFailed)
	require.ErrorIs(t, rs[7].Err, bad)
	ok(8, "c", false)
	require.Equal(t, 1+3, e.count("c"), "old, a, b and c")
	// At most 2n+f effect calls, n the requests that run one (a, b,
	// flaky, declined, c), f the failures.
	require.LessOrEqual(t, int(calls.Load()), 2*5+2)

	res, err := e.s.Apply(bg, req("flaky"), inc("c", "flaky"))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "the failed request recorded nothing")
	_, err = e.s.Apply(bg, req("declined"), inc("c", "x"))
	require.ErrorIs(t, err, oncekv.ErrFailed, "the permanent failure was recorded")
	e.reopen()
	for _, k := range []string{"a", "b", "c"} {
		res, err := e.s.Apply(bg, req(k), inc("c", "x"))
		require.NoError(t, err)
		require.True(t, res.Duplicate, k)
		require.Equal(t, k, string(res.Response))
	}
	require.Equal(t, 5, e.count("c"))
}

// testBatchDuplicates: a batch delivered again runs no effect.
func testBatchDuplicates(t *testing.T, e *env) {
	var reqs []oncekv.Request
	for i := range 50 {
		reqs = append(reqs, req(string(rune('A'+i))))
	}
	eff := func(i int) *Effect { return inc("c", reqs[i].Key) }
	rs, err := e.s.ApplyBatch(bg, reqs, eff)
	require.NoError(t, err)
	for i, r := range rs {
		require.NoError(t, r.Err)
		require.False(t, r.Duplicate, i)
	}
	e.reopen()
	calls := 0
	rs, err = e.s.ApplyBatch(bg, reqs, func(i int) *Effect { calls++; return eff(i) })
	require.NoError(t, err)
	require.Zero(t, calls)
	for i, r := range rs {
		require.NoError(t, r.Err)
		require.True(t, r.Duplicate, i)
		require.Equal(t, reqs[i].Key, string(r.Response))
	}
	require.Equal(t, 50, e.count("c"))
	rs, err = e.s.ApplyBatch(bg, nil, eff)
	require.NoError(t, err)
	require.Empty(t, rs)
}
