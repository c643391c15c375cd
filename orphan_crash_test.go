package oncekv_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// TestOrphanedClaimReleasedAtOpen: a claim whose holder was SIGKILLed is
// released when the store is next opened, so the retry does not wait for
// its lease (an hour here); with KeepOrphanedClaims it waits, and is told
// until when.
func TestOrphanedClaimReleasedAtOpen(t *testing.T) {
	needChildren(t)
	dir := t.TempDir()
	_, deadToken := killHolder(t, dir)
	path := filepath.Join(dir, "store.db")
	ctx := context.Background()

	keep, err := oncekv.Open(path, &oncekv.Options{ExpireInterval: -1, KeepOrphanedClaims: true})
	require.NoError(t, err)
	_, err = keep.Claim(ctx, charge, time.Minute)
	var ipe *oncekv.InProgressError
	require.ErrorAs(t, err, &ipe, "kept: the orphan holds the key until its lease ends")
	require.WithinDuration(t, time.Now().Add(time.Hour), ipe.LeaseUntil(), 5*time.Minute)
	require.NoError(t, keep.Close())

	db, err := oncekv.Open(path, &oncekv.Options{ExpireInterval: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	// The operator sees it for what it is.
	info, err := db.Mark(charge.Handler, charge.Key)
	require.NoError(t, err)
	require.Equal(t, oncekv.MarkInProgress, info.State)
	require.True(t, info.Orphaned)
	require.True(t, info.Released)
	require.Equal(t, deadToken, info.Token)
	var listed []oncekv.MarkInfo
	require.NoError(t, db.Claims(func(m oncekv.MarkInfo) error { listed = append(listed, m); return nil }))
	require.Len(t, listed, 1)
	require.True(t, listed[0].Orphaned)

	c, err := db.Claim(ctx, charge, time.Minute)
	require.NoError(t, err, "released at Open: taken over at once")
	require.Greater(t, c.Token(), deadToken)

	// This process's own claims are not orphans: another Claim is refused.
	_, err = db.Claim(ctx, charge, time.Minute)
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	require.NoError(t, c.Fail(ctx, nil))
}
