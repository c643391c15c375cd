package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// TestAbandonForgetsTheKey: after Abandon the key is unseen, so a claim
// with another payload (no ErrKeyReuse) takes it at once with a greater
// token; the abandoned claim's calls change nothing.
func TestAbandonForgetsTheKey(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newPool(t), postgres.Options{})
	req := oncekv.Request{Handler: "notes", Key: "n-1", Payload: []byte("bad")}
	first, err := s.Claim(ctx, req, time.Minute)
	require.NoError(t, err)
	require.NoError(t, first.Abandon(ctx))
	require.ErrorIs(t, first.Abandon(ctx), oncekv.ErrClaimDone)

	req.Payload = []byte("corrected")
	second, err := s.Claim(ctx, req, time.Minute)
	require.NoError(t, err, "an abandoned key is free at once, whatever the payload")
	require.False(t, second.Done())
	require.Greater(t, second.Token(), first.Token())
	require.Equal(t, first.Key(), second.Key())

	_, err = first.Complete(ctx, []byte("late"), nil)
	require.ErrorIs(t, err, oncekv.ErrClaimDone)
	_, err = second.Complete(ctx, []byte("saved"), nil)
	require.NoError(t, err)
	res, err := s.Apply(ctx, req, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "saved", string(res.Response))
}

// TestAbandonOfATakenOverClaimIsFenced: a zombie's Abandon must not drop
// the new holder's mark.
func TestAbandonOfATakenOverClaimIsFenced(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newPool(t), postgres.Options{})
	req := oncekv.Request{Handler: "notes", Key: "n-2", Payload: []byte("p")}
	zombie, err := s.Claim(ctx, req, time.Millisecond)
	require.NoError(t, err)
	var holder *postgres.Claim
	require.Eventually(t, func() bool {
		holder, err = s.Claim(ctx, req, time.Minute)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)
	require.ErrorIs(t, zombie.Abandon(ctx), oncekv.ErrFenced)
	_, err = s.Claim(ctx, req, time.Minute)
	require.ErrorIs(t, err, oncekv.ErrInProgress, "the holder's mark is still there")
	_, err = holder.Complete(ctx, []byte("ok"), nil)
	require.NoError(t, err)
}
