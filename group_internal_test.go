package oncekv

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGroupCommitTakesWhatArrivedDuringTheFlush holds the leader's commit
// inside its effect until seven more callers have queued, then checks that
// those seven share the next commit: two commits for eight Apply calls, and
// no timer anywhere (bbolt's Batch would have waited for 1000 calls or
// 10 ms).
func TestGroupCommitTakesWhatArrivedDuringTheFlush(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "g.db"), &Options{NoSync: true, ExpireInterval: -1})
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()

	entered, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := db.Apply(ctx, Request{Handler: "h", Key: "leader"}, func(*Tx) ([]byte, error) {
			close(entered)
			<-release
			return nil, nil
		})
		require.NoError(t, err)
	})
	<-entered
	before := db.Stats().Commits
	for i := range 7 {
		wg.Go(func() {
			_, err := db.Apply(ctx, Request{Handler: "h", Key: fmt.Sprint("follower-", i)}, nil)
			require.NoError(t, err)
		})
	}
	require.Eventually(t, func() bool {
		db.group.mu.Lock()
		defer db.group.mu.Unlock()
		return len(db.group.queue) == 7
	}, 10*time.Second, time.Millisecond, "seven callers queue behind the running commit")
	close(release)
	wg.Wait()
	require.Equal(t, uint64(2), db.Stats().Commits-before,
		"the leader's commit, then one commit for the seven that queued")
	require.Equal(t, uint64(8), db.Stats().Total.Applied)
	db.group.mu.Lock()
	require.False(t, db.group.leading, "no leader is left behind")
	db.group.mu.Unlock()
}
