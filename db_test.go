package oncekv_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

func TestUseAfterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "closed.db")
	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, db.Close(), "closing twice is harmless")

	ctx := context.Background()
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.ErrorIs(t, err, oncekv.ErrClosed)
	_, err = db.ApplyBatch(ctx, []oncekv.Request{{Handler: "h", Key: "k"}}, nil)
	require.ErrorIs(t, err, oncekv.ErrClosed)
	require.ErrorIs(t, db.Update(func(*oncekv.Tx) error { return nil }), oncekv.ErrClosed)
	require.ErrorIs(t, db.View(func(*oncekv.Tx) error { return nil }), oncekv.ErrClosed)
}

// Done is open while the store is and closed once Close begins, for code
// that waits between calls on the store.
func TestDoneIsClosedByClose(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "done.db"), nil)
	require.NoError(t, err)
	select {
	case <-db.Done():
		require.FailNow(t, "Done is closed on an open store")
	default:
	}
	require.NoError(t, db.Close())
	select {
	case <-db.Done():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Done is not closed after Close")
	}
	require.NoError(t, db.Close(), "a second Close must not close Done twice")
}

// TestSyncForNoSync: Sync works on a NoSync store and after Close says so.
func TestSyncForNoSync(t *testing.T) {
	path := t.TempDir() + "/s.db"
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	_, err = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.NoError(t, err)
	require.NoError(t, db.Sync())
	require.NoError(t, db.Close())
	require.ErrorIs(t, db.Sync(), oncekv.ErrClosed)
}
