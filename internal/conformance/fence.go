package conformance

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// testNextFence: tokens of a resource grow strictly, from 1, across
// reopens; resources count apart.
func testNextFence(t *testing.T, e *env) {
	next := func(r string) uint64 {
		t.Helper()
		n, err := e.s.NextFence(bg, r)
		require.NoError(t, err)
		return n
	}
	require.Equal(t, uint64(1), next("acct-1"))
	require.Equal(t, uint64(2), next("acct-1"))
	require.Equal(t, uint64(1), next("acct-2"))
	e.reopen()
	require.Equal(t, uint64(3), next("acct-1"))
	_, err := e.s.NextFence(bg, "")
	require.ErrorIs(t, err, oncekv.ErrResourceRequired)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
}

// testFencedWrite: a write applies only with a fence greater than the
// stored one; a refused one changes nothing.
func testFencedWrite(t *testing.T, e *env) {
	write := func(fence uint64, v string) error { return e.s.FencedWrite(bg, "acct-1", fence, v) }
	value := func() string {
		t.Helper()
		v, err := e.s.Value(bg, "acct-1")
		require.NoError(t, err)
		return v
	}
	require.NoError(t, write(5, "five"))
	for _, f := range []uint64{5, 3} {
		err := write(f, "stale")
		require.ErrorIs(t, err, oncekv.ErrFenced)
		var fe *oncekv.FenceError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, uint64(5), fe.Stored)
		require.Equal(t, f, fe.Presented)
		require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
	}
	require.Equal(t, "five", value())
	require.ErrorIs(t, write(0, "zero"), oncekv.ErrInvalidFence)
	require.NoError(t, write(6, "six"))
	e.reopen()
	require.ErrorIs(t, write(6, "stale"), oncekv.ErrFenced)
	require.Equal(t, "six", value())
	require.NoError(t, write(1<<63+1, "big"), "fences use all 64 bits")
	require.ErrorIs(t, write(1<<63, "stale"), oncekv.ErrFenced)
	require.Equal(t, "big", value())
}

// testClaimTokensFence: a claim's token fences the late write of the
// holder it replaced.
func testClaimTokensFence(t *testing.T, e *env) {
	r := req("job-1")
	a := e.claim(r, lease)
	require.NoError(t, e.s.FencedWrite(bg, "out", a.Token(), "a"))
	e.clk.Advance(2 * lease)
	b := e.claim(r, lease)
	require.NoError(t, e.s.FencedWrite(bg, "out", b.Token(), "b"))
	require.ErrorIs(t, e.s.FencedWrite(bg, "out", a.Token(), "a, late"), oncekv.ErrFenced)
	v, err := e.s.Value(bg, "out")
	require.NoError(t, err)
	require.Equal(t, "b", v)
}
