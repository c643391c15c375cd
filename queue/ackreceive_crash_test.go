//go:build unix

package queue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/oncetest"
	"github.com/oncekv/oncekv/queue"
)

// ackReceiveChild is TestKilledRightAfterAckAndReceive's child (see
// orphanEnv): it receives, calls AckAndReceive, prints what it acked and
// what it got, and SIGKILLs itself.
func ackReceiveChild(q *queue.Queue) {
	m, err := q.Receive(context.Background())
	if err != nil {
		panic(err)
	}
	next, err := q.AckAndReceive(context.Background(), m)
	if err != nil {
		panic(err)
	}
	// Right after the commit: nothing else is written.
	fmt.Printf("acked %d got %d %s %d %d\n", m.ID, next.ID, next.Key, next.Attempt, next.Token)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestKilledRightAfterAckAndReceive: a consumer SIGKILLed right after
// AckAndReceive's commit leaves the acked message gone for good and the
// next one's lease released at the next Open: visible at once on a clock
// that has not moved, its interrupted delivery counted and said.
func TestKilledRightAfterAckAndReceive(t *testing.T) {
	if v := os.Getenv(orphanEnv); v != "" {
		orphanChild(v)
		return
	}
	path := filepath.Join(t.TempDir(), "ackreceive.db")
	seedStopped(t, path, "edit-1", "edit-2", "edit-3")

	out, killed := runOrphanChild(t, "TestKilledRightAfterAckAndReceive", path, "ackreceive")
	require.True(t, killed, "the child kills itself")
	var acked, got, token uint64
	var key string
	var attempt int
	_, err := fmt.Sscanf(out, "acked %d got %d %s %d %d", &acked, &got, &key, &attempt, &token)
	require.NoError(t, err, out)
	require.Equal(t, "edit-2", key)
	require.Equal(t, 1, attempt)

	db, q := openStopped(t, path, false)
	defer func() { require.NoError(t, db.Close()); oncetest.Check(t, path) }()
	defer q.Close()
	_, err = q.View().Message(acked)
	require.ErrorIs(t, err, queue.ErrNotFound, "the acked message is gone")
	st, err := q.Stats()
	require.NoError(t, err)
	require.Equal(t, []uint64{2, 2, 0}, []uint64{st.Depth, st.Ready, st.InFlight}, "released: %+v", st)
	ms, err := q.Poll(context.Background(), 2)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, got, ms[0].ID, "the released lease first: it kept its place")
	require.Equal(t, 2, ms[0].Attempt, "the interrupted delivery counts")
	require.Greater(t, ms[0].Token, token)
	require.Contains(t, ms[0].LastError, "attempt 1 was interrupted")
	require.Equal(t, "edit-3", ms[1].Key)
	require.Equal(t, 1, ms[1].Attempt)
	require.NoError(t, q.View().Check(func(p error) error { return p }))
}
