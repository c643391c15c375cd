package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// TestTombstoneRetentionChecked: a negative TombstoneRetention, one not
// longer than Retention, or one of too many windows is refused with
// ErrInvalidOptions naming the field.
func TestTombstoneRetentionChecked(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	for _, o := range []postgres.Options{
		{TombstoneRetention: -time.Hour},
		{Retention: 24 * time.Hour, TombstoneRetention: 24 * time.Hour},
		{Retention: time.Hour, WindowSpan: time.Minute, TombstoneRetention: (oncekv.MaxWindows + 1) * time.Minute},
	} {
		o.Schema, o.ExpireInterval = freshSchema(t, pool), -1
		_, err := postgres.Open(ctx, pool, o)
		require.ErrorIs(t, err, oncekv.ErrInvalidOptions, "%+v", o)
		require.Contains(t, err.Error(), "TombstoneRetention")
	}
}

// TestTombstonesTurnedOff: a store opened again without
// TombstoneRetention reads no tombstone (the key applies afresh) and its
// expiry drops every partition of them.
func TestTombstonesTurnedOff(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	schema := freshSchema(t, pool)
	clock := time.Date(2030, 1, 2, 3, 30, 0, 0, time.UTC)
	opts := postgres.Options{Schema: schema, Retention: 24 * time.Hour, WindowSpan: time.Hour, TombstoneRetention: 72 * time.Hour,
		Now: func() time.Time { return clock }, ExpireInterval: -1}
	s, err := postgres.Open(ctx, pool, opts)
	require.NoError(t, err)
	r := oncekv.Request{Handler: "h", Key: "k"}
	ran := 0
	effect := func(context.Context, pgx.Tx) ([]byte, error) { ran++; return []byte("r"), nil }
	_, err = s.Apply(ctx, r, effect)
	require.NoError(t, err)
	clock = clock.Add(26 * time.Hour)
	_, err = s.Expire(ctx)
	require.NoError(t, err)
	res, err := s.Apply(ctx, r, effect)
	require.NoError(t, err)
	require.True(t, res.ResponseExpired)
	require.Equal(t, uint64(1), s.Stats().TombstoneDuplicates)
	require.Equal(t, 1, tombTables(t, schema))
	st, err := s.Storage(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Tombstones)
	require.Positive(t, st.TombstoneBytes)
	require.NoError(t, s.Close())

	opts.TombstoneRetention = 0
	s, err = postgres.Open(ctx, pool, opts)
	require.NoError(t, err)
	defer s.Close()
	res, err = s.Apply(ctx, r, effect)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "no tombstone is read")
	require.Equal(t, 2, ran)
	_, err = s.Expire(ctx)
	require.NoError(t, err)
	require.Zero(t, tombTables(t, schema), "dropped")
}

// tombTables counts the partitions of tombstones of schema.
func tombTables(t *testing.T, schema string) (n int) {
	t.Helper()
	require.NoError(t, newPool(t).QueryRow(context.Background(), `SELECT count(*) FROM pg_class
		WHERE relnamespace = to_regnamespace($1) AND relkind = 'r' AND starts_with(relname, 'tombs_')`,
		pgx.Identifier{schema}.Sanitize()).Scan(&n))
	return n
}
