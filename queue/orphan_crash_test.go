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
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// orphanEnv makes this test binary the consumer child of the tests below:
// "PATH,hold" leases one message and waits to be killed; "PATH,crash"
// leases one and kills itself, as a message that crashes its consumer
// would; either prints "empty" and exits when there is none.
// "PATH,ackreceive" is TestKilledRightAfterAckAndReceive's child.
const orphanEnv = "ONCEKV_QUEUE_ORPHAN_CHILD"

// stopped is the clock of the parent and every child: it never moves, so
// a lease that ends is one the Open released, never one that ran out.
func stopped() time.Time { return t0 }

func orphanOptions(keep bool) *queue.Options {
	return &queue.Options{Visibility: time.Hour, Retry: &retry.Policy{MaxAttempts: 3}, KeepOrphanedLeases: keep}
}

func orphanChild(arg string) {
	path, mode, _ := strings.Cut(arg, ",")
	db, err := oncekv.Open(path, &oncekv.Options{Now: stopped, ExpireInterval: -1})
	if err != nil {
		panic(err)
	}
	q, err := queue.Open(db, "jobs", orphanOptions(false))
	if err != nil {
		panic(err)
	}
	if mode == "ackreceive" {
		ackReceiveChild(q)
	}
	ms, err := q.Poll(context.Background(), 1)
	if err != nil {
		panic(err)
	}
	if len(ms) == 0 {
		fmt.Println("empty")
		_ = db.Close()
		os.Exit(0)
	}
	fmt.Println("leased", ms[0].Attempt, ms[0].Token)
	if mode == "crash" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	select {} // until SIGKILL, the lease held
}

// seedStopped makes a store at path, on the stopped clock, whose queue
// holds one message per key, its body "b".
func seedStopped(t *testing.T, path string, keys ...string) {
	t.Helper()
	db, q := openStopped(t, path, false)
	for _, k := range keys {
		_, err := q.Enqueue(context.Background(), queue.Message{Key: k, Body: []byte("b")})
		require.NoError(t, err)
	}
	require.NoError(t, q.Close())
	require.NoError(t, db.Close())
}

// openStopped opens the store at path and its queue on the stopped clock.
func openStopped(t *testing.T, path string, keep bool) (*oncekv.DB, *queue.Queue) {
	t.Helper()
	db, err := oncekv.Open(path, &oncekv.Options{Now: stopped, ExpireInterval: -1})
	require.NoError(t, err)
	q, err := queue.Open(db, "jobs", orphanOptions(keep))
	require.NoError(t, err)
	return db, q
}

// runOrphanChild runs the child in mode and returns what it printed; a
// "hold" child is killed once it has leased.
func runOrphanChild(t *testing.T, testName, path, mode string) (out string, killed bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+testName+"$")
	cmd.Env = append(os.Environ(), orphanEnv+"="+path+","+mode)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	if sc.Scan() {
		out = sc.Text()
	}
	if mode == "hold" && strings.HasPrefix(out, "leased") {
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	}
	for sc.Scan() {
	}
	err = cmd.Wait()
	if err == nil {
		return out, false
	}
	ws := err.(*exec.ExitError).Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child failed: %v", err)
	return out, true
}

// TestLeaseOfAKilledConsumerIsReleasedAtOpen: a consumer SIGKILLed while
// it holds an hour's lease leaves the message visible again the moment
// the next process opens the queue, on a clock that has not moved, with
// the interrupted delivery counted and said; with KeepOrphanedLeases it
// waits the lease out.
func TestLeaseOfAKilledConsumerIsReleasedAtOpen(t *testing.T) {
	if v := os.Getenv(orphanEnv); v != "" {
		orphanChild(v)
		return
	}
	path := filepath.Join(t.TempDir(), "orphan.db")
	seedStopped(t, path, "edit-1")

	out, killed := runOrphanChild(t, "TestLeaseOfAKilledConsumerIsReleasedAtOpen", path, "hold")
	require.True(t, killed)
	var attempt int
	var token uint64
	_, err := fmt.Sscanf(out, "leased %d %d", &attempt, &token)
	require.NoError(t, err, out)
	require.Equal(t, 1, attempt)

	db, q := openStopped(t, path, true)
	st, err := q.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.InFlight, "kept: %+v", st)
	ms, err := q.Poll(context.Background(), 1)
	require.NoError(t, err)
	require.Empty(t, ms, "KeepOrphanedLeases waits the lease out")
	require.NoError(t, q.Close())
	require.NoError(t, db.Close())

	db, q = openStopped(t, path, false)
	defer func() { require.NoError(t, db.Close()); oncetest.Check(t, path) }()
	defer q.Close()
	st, err = q.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.Ready, "released: %+v", st)
	require.Zero(t, st.InFlight)
	ms, err = q.Poll(context.Background(), 1)
	require.NoError(t, err)
	require.Len(t, ms, 1, "visible at once, though the hour's lease has not run out")
	require.Equal(t, "edit-1", ms[0].Key)
	require.Equal(t, 2, ms[0].Attempt, "the interrupted delivery counts")
	require.Greater(t, ms[0].Token, token)
	require.Contains(t, ms[0].LastError, "attempt 1 was interrupted")
	require.NoError(t, q.View().Check(func(p error) error { return p }))
}

// TestConsumerThatCrashesEveryTimeIsDeadLetteredAfterMaxAttempts: a
// message whose processing kills its consumer (SIGKILL) each time is
// delivered MaxAttempts times, one per restart, then dead-lettered at the
// next Open's first receive, saying why, and never delivered again.
func TestConsumerThatCrashesEveryTimeIsDeadLetteredAfterMaxAttempts(t *testing.T) {
	if v := os.Getenv(orphanEnv); v != "" {
		orphanChild(v)
		return
	}
	path := filepath.Join(t.TempDir(), "poison.db")
	seedStopped(t, path, "poison")

	var attempts []string
	for round := 0; ; round++ {
		require.Less(t, round, 10, "the message loops: %v", attempts)
		out, killed := runOrphanChild(t, "TestConsumerThatCrashesEveryTimeIsDeadLetteredAfterMaxAttempts", path, "crash")
		if !killed {
			require.Equal(t, "empty", out)
			break
		}
		attempts = append(attempts, out)
	}
	require.Len(t, attempts, 3, "one delivery per restart, MaxAttempts in all")
	for i, a := range attempts {
		require.True(t, strings.HasPrefix(a, fmt.Sprintf("leased %d ", i+1)), a)
	}
	db, err := oncekv.Open(path, &oncekv.Options{Now: stopped, ExpireInterval: -1, ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	q, err := queue.Open(db, "jobs", nil)
	require.NoError(t, err)
	defer q.Close()
	dead, err := q.DeadLetters(0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, 3, dead[0].Attempt)
	require.Contains(t, dead[0].LastError, "attempt 3 was interrupted")
	st, err := q.Stats()
	require.NoError(t, err)
	require.Zero(t, st.Depth)
}
