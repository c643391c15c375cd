//go:build unix

package queue_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

const crashEnv = "ONCEKV_QUEUE_CRASH_CHILD"

// crashClock is the child's clock: an hour later per round, so every lease
// taken by an earlier (killed) round has run out.
func crashClock(round int) func() time.Time {
	return func() time.Time { return time.Now().Add(time.Duration(round) * time.Hour) }
}

func crashOptions() *queue.Options {
	return &queue.Options{Retry: &retry.Policy{MaxAttempts: -1}}
}

// TestConsumerKilledBetweenReceiveAndAckTx kills consumers (child
// processes re-running this test binary) with SIGKILL at random points
// between Receive and the commit of AckTx, over many rounds, and checks
// that every message's effect was applied exactly once, none was lost, and
// none is left in flight.
func TestConsumerKilledBetweenReceiveAndAckTx(t *testing.T) {
	if v := os.Getenv(crashEnv); v != "" {
		crashChild(v)
		return
	}
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	const messages = 120
	path := filepath.Join(t.TempDir(), "crash.db")
	db, err := oncekv.Open(path, &oncekv.Options{Now: crashClock(0)})
	require.NoError(t, err)
	q, err := queue.Open(db, "jobs", crashOptions())
	require.NoError(t, err)
	for i := range messages {
		_, err := q.Enqueue(ctx, queue.Message{Key: fmt.Sprint("m", i), Body: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
	}
	require.NoError(t, q.Close())
	require.NoError(t, db.Close())

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	seed := rng.Uint64()
	t.Logf("seed %d", seed)
	rng = rand.New(rand.NewPCG(seed, 7))
	acked := map[string]int{}
	kills, round := 0, 1
	for ; round < 400; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerKilledBetweenReceiveAndAckTx$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d", crashEnv, path, round, rng.Uint64()))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		// Half the rounds are also killed from outside, at a random time.
		if rng.IntN(2) == 0 {
			d := time.Duration(rng.IntN(30)) * time.Millisecond
			timer := time.AfterFunc(d, func() { _ = cmd.Process.Kill() })
			defer timer.Stop()
		}
		empty := false
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if key, ok := strings.CutPrefix(line, "acked "); ok {
				acked[key]++
			}
			empty = empty || line == "empty"
		}
		err = cmd.Wait()
		if empty && err == nil {
			break
		}
		if err != nil {
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			ws := ee.Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child failed: %v", err)
			kills++
		}
	}
	t.Logf("%d rounds, %d kills", round, kills)
	require.Greater(t, kills, 10, "the test must actually kill consumers")

	db, err = oncekv.Open(path, &oncekv.Options{Now: crashClock(round + 1)})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()); oncetest.Check(t, path) }()
	q, err = queue.Open(db, "jobs", crashOptions())
	require.NoError(t, err)
	defer q.Close()
	st, err := q.Stats()
	require.NoError(t, err)
	require.Zero(t, st.Depth, "none left: %+v", st)
	require.Zero(t, st.Dead)
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("applied"))
		require.NotNil(t, b)
		for i := range messages {
			key := fmt.Sprint("m", i)
			require.Equal(t, uint64(1), readCount(b.Get([]byte(key))), "%s applied once", key)
			require.LessOrEqual(t, acked[key], 1, "%s acked once", key)
		}
		return nil
	}))
}

func readCount(v []byte) uint64 {
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// crashChild consumes until the queue is empty, killing itself at random
// points around the effect and AckTx.
func crashChild(arg string) {
	parts := strings.Split(arg, ",")
	round, _ := strconv.Atoi(parts[1])
	seed, _ := strconv.ParseUint(parts[2], 10, 64)
	rng := rand.New(rand.NewPCG(seed, 1))
	db, err := oncekv.Open(parts[0], &oncekv.Options{Now: crashClock(round)})
	if err != nil {
		panic(err)
	}
	q, err := queue.Open(db, "jobs", crashOptions())
	if err != nil {
		panic(err)
	}
	kill := func(point, at int) {
		if point == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	for {
		ms, err := q.Poll(context.Background(), 1)
		if err != nil {
			panic(err)
		}
		if len(ms) == 0 {
			fmt.Println("empty")
			_ = db.Close()
			os.Exit(0)
		}
		m := ms[0]
		point := -1
		if rng.IntN(8) == 0 {
			point = rng.IntN(5)
		}
		kill(point, 0) // received, nothing done
		err = db.Update(func(tx *oncekv.Tx) error {
			kill(point, 1) // in the transaction, before the effect
			b, err := tx.CreateBucketIfNotExists([]byte("applied"))
			if err != nil {
				return err
			}
			n := readCount(b.Get([]byte(m.Key))) + 1
			if err := b.Put([]byte(m.Key), binary.BigEndian.AppendUint64(nil, n)); err != nil {
				return err
			}
			kill(point, 2) // effect written, no ack
			if err := q.AckTx(tx, m); err != nil {
				return err
			}
			kill(point, 3) // acked, not committed
			return nil
		})
		if err != nil {
			panic(err)
		}
		kill(point, 4) // committed, not reported
		fmt.Println("acked", m.Key)
	}
}
