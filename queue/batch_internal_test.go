package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// fakeCommits is a batcher's run: it records what each committed
// transaction held, and rolls back (forgets) a transaction whose fn failed.
type fakeCommits struct {
	mu        sync.Mutex
	committed [][]int
	current   []int
	delay     time.Duration
	attempts  atomic.Int64
}

func (f *fakeCommits) run(fn func(otx *oncekv.Tx) error) error {
	f.attempts.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current = nil
	if err := fn(nil); err != nil {
		return err
	}
	time.Sleep(f.delay) // an fsync, so that callers pile up
	f.committed = append(f.committed, f.current)
	return nil
}

// op returns an fn that records i in the current transaction, or fails.
func (f *fakeCommits) op(i int, fail error) func(*oncekv.Tx) error {
	return func(*oncekv.Tx) error {
		if fail != nil {
			return fail
		}
		f.current = append(f.current, i) // run holds f.mu
		return nil
	}
}

func TestBatcherSharesCommitsAndIsolatesFailures(t *testing.T) {
	f := &fakeCommits{delay: time.Millisecond}
	b := &batcher{run: f.run}
	const n = 200
	boom := errors.New("boom")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var fail error
			if i%10 == 0 {
				fail = boom
			}
			errs[i] = b.do(context.Background(), f.op(i, fail))
		}()
	}
	wg.Wait()
	seen := map[int]int{}
	for _, c := range f.committed {
		for _, i := range c {
			seen[i]++
		}
	}
	for i := range n {
		if i%10 == 0 {
			require.ErrorIs(t, errs[i], boom)
			require.Zero(t, seen[i], "a failed op left nothing")
		} else {
			require.NoError(t, errs[i])
			require.Equal(t, 1, seen[i], "op %d committed once", i)
		}
	}
	require.Less(t, len(f.committed), n-n/10, "callers shared commits")
	require.False(t, b.leading)
	require.Empty(t, b.queue)
}

func TestBatcherWithdrawsQueuedOpWhenCtxDone(t *testing.T) {
	f := &fakeCommits{}
	b := &batcher{run: f.run}
	release := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_ = b.do(context.Background(), func(*oncekv.Tx) error {
			close(started)
			<-release // hold the lead
			return nil
		})
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- b.do(ctx, f.op(1, nil)) }()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue) == 1
	}, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "withdrawn while queued")
	close(release)
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return !b.leading
	}, 10*time.Second, time.Millisecond)
	for _, c := range f.committed {
		require.NotContains(t, c, 1, "a withdrawn op never runs")
	}
	// The batcher still works.
	require.NoError(t, b.do(context.Background(), f.op(2, nil)))
}
