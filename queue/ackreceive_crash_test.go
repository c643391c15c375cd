//go:build unix

package queue_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
	"github.com/oncekv/oncekv/queue"
)

// ackReceiveEnv makes this test binary the consumer child of
// TestKilledRightAfterAckAndReceive: it receives, calls AckAndReceive,
// prints what it acked and what it got, and SIGKILLs itself.
const ackReceiveEnv = "ONCEKV_QUEUE_ACKRECEIVE_CHILD"

func ackReceiveChild(path string) {
	db, err := oncekv.Open(path, &oncekv.Options{Now: stopped, ExpireInterval: -1})
	if err != nil {
		panic(err)
	}
	q, err := queue.Open(db, "jobs", orphanOptions(false))
	if err != nil {
		panic(err)
	}
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
	if v := os.Getenv(ackReceiveEnv); v != "" {
		ackReceiveChild(v)
		return
	}
	path := filepath.Join(t.TempDir(), "ackreceive.db")
	db, err := oncekv.Open(path, &oncekv.Options{Now: stopped, ExpireInterval: -1})
	require.NoError(t, err)
	q, err := queue.Open(db, "jobs", orphanOptions(false))
	require.NoError(t, err)
	for _, k := range []string{"edit-1", "edit-2", "edit-3"} {
		_, err = q.Enqueue(context.Background(), queue.Message{Key: k, Body: []byte(k)})
		require.NoError(t, err)
	}
	require.NoError(t, q.Close())
	require.NoError(t, db.Close())

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledRightAfterAckAndReceive$")
	cmd.Env = append(os.Environ(), ackReceiveEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var out string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "acked ") {
			out = sc.Text()
		}
	}
	err = cmd.Wait()
	require.Error(t, err, "the child kills itself")
	ws := err.(*exec.ExitError).Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child failed: %v", err)
	var acked, got uint64
	var key string
	var attempt int
	var token uint64
	_, err = fmt.Sscanf(out, "acked %d got %d %s %d %d", &acked, &got, &key, &attempt, &token)
	require.NoError(t, err, out)
	require.Equal(t, "edit-2", key)
	require.Equal(t, 1, attempt)

	db, err = oncekv.Open(path, &oncekv.Options{Now: stopped, ExpireInterval: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()); oncetest.Check(t, path) }()
	q, err = queue.Open(db, "jobs", orphanOptions(false))
	require.NoError(t, err)
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
