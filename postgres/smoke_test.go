package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

func TestSmoke(t *testing.T) {
	pool := newPool(t)
	s := openStore(t, pool, postgres.Options{})
	ctx := context.Background()
	n := 0
	eff := func(ctx context.Context, tx pgx.Tx) ([]byte, error) { n++; return []byte("r"), nil }
	res, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}, eff)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	res, err = s.Apply(ctx, oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}, eff)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "r", string(res.Response))
	require.Equal(t, 1, n)
	_, err = s.Apply(ctx, oncekv.Request{Handler: "h", Key: "k", Payload: []byte("q")}, eff)
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	rs, err := s.ApplyBatch(ctx, []oncekv.Request{{Handler: "h", Key: "a"}, {Handler: "h", Key: "b"}, {Handler: "h", Key: "a"}, {Handler: "h", Key: "k", Payload: []byte("p")}},
		func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error) { n++; return nil, nil })
	require.NoError(t, err)
	t.Logf("%+v", rs)
	require.Equal(t, 3, n)
	c, err := s.Claim(ctx, oncekv.Request{Handler: "h", Key: "c"}, 10e9)
	require.NoError(t, err)
	t.Log(c.Token(), c.Key(), c.LeaseUntil())
	_, err = s.Apply(ctx, oncekv.Request{Handler: "h", Key: "c"}, eff)
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	t.Log(err)
	res, err = c.Complete(ctx, []byte("done"), nil)
	require.NoError(t, err)
	res, err = s.Apply(ctx, oncekv.Request{Handler: "h", Key: "c"}, eff)
	require.NoError(t, err)
	require.Equal(t, "done", string(res.Response))
	f, err := s.NextFence(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, uint64(1), f)
	st, err := s.Expire(ctx)
	require.NoError(t, err)
	t.Logf("%+v", st)
}
