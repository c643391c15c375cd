package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/oncekv/oncekv"
)

// TestRunAgainstABroker runs the example against kfake (no Kafka broker
// can be installed where the tests run): it produces 40 records, ten of
// them twice, consumes them, and stops on its context; each key is stored
// once.
func TestRunAgainstABroker(t *testing.T) {
	c, err := kfake.NewCluster(kfake.SeedTopics(2, "payments"))
	require.NoError(t, err)
	defer c.Close()
	path := filepath.Join(t.TempDir(), "billing.db")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := run(ctx, c.ListenAddrs(), "payments", "billing", path, 40)
	require.NoError(t, err)
	require.Equal(t, uint64(40), st.Applied)
	require.Equal(t, uint64(10), st.Duplicates, "the second copies")

	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	defer db.Close()
	n := 0
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		return tx.Bucket([]byte("payments")).ForEach(func(k, v []byte) error { n++; return nil })
	}))
	require.Equal(t, 40, n)
}
