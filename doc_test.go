package oncekv_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// TestDeletingWhatIsNotThere pins the rule of doc.go's Conventions:
// deleting what is not there is not an error, anywhere; asking about it is.
func TestDeletingWhatIsNotThere(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	require.NoError(t, db.Forget("h", "never-seen"))
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		require.NoError(t, tx.DeleteBucket([]byte("never-created")))
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		require.NoError(t, err)
		require.NoError(t, b.Delete([]byte("absent")))
		require.NoError(t, tx.DeleteBucket([]byte("b")))
		require.NoError(t, tx.DeleteBucket([]byte("b")), "twice")
		return nil
	}))
	_, err := db.Mark("h", "never-seen")
	require.ErrorIs(t, err, oncekv.ErrNotFound)
	require.ErrorIs(t, db.ReleaseClaim("h", "never-seen", 1), oncekv.ErrNotFound)
}
