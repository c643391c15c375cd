package oncekv_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

func TestClaimAbandonForgetsTheKey(t *testing.T) {
	clock := oncetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	db := oncetest.Open(t, &oncekv.Options{Now: clock.Now})
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("bad body")}
	c, err := db.Claim(ctx, req, time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Abandon(ctx))
	_, err = db.Mark("h", "k")
	require.ErrorIs(t, err, oncekv.ErrNotFound, "no mark is left")
	require.ErrorIs(t, c.Abandon(ctx), oncekv.ErrClaimDone)
	_, err = c.Complete(ctx, nil, nil)
	require.ErrorIs(t, err, oncekv.ErrClaimDone)

	// The corrected request, under the same key, runs afresh.
	fixed := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("good body")}
	c2, err := db.Claim(ctx, fixed, time.Minute)
	require.NoError(t, err)
	require.False(t, c2.Done())
	require.Greater(t, c2.Token(), c.Token())
	_, err = c2.Complete(ctx, []byte("ok"), nil)
	require.NoError(t, err)
	require.ErrorIs(t, c2.Abandon(ctx), oncekv.ErrClaimDone)
	res, err := db.Apply(ctx, fixed, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)

	// A claim taken over is fenced, and the taker's mark stays.
	stale, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "z"}, time.Minute)
	require.NoError(t, err)
	clock.Advance(2 * time.Minute)
	taker, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "z"}, time.Minute)
	require.NoError(t, err)
	require.ErrorIs(t, stale.Abandon(ctx), oncekv.ErrFenced)
	m, err := db.Mark("h", "z")
	require.NoError(t, err)
	require.Equal(t, taker.Token(), m.Token)
}
