package oncekv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeEnv is a groupEnv without a store: a one-slot write lock, and a
// commit that records each batch and settles its ops (or runs hook first).
type fakeEnv struct {
	lock writeLock
	mu   sync.Mutex
	// batches records the keys of each committed batch.
	batches [][]string
	hook    func(batch []*op) // runs at the start of each commit, if set
}

func newFakeGroup(t *testing.T, maxSize int) (*group, *fakeEnv) {
	t.Helper()
	env := &fakeEnv{lock: newWriteLock()}
	g := &group{}
	g.init(groupEnv{
		lock:   env.lock.LockContext,
		unlock: env.lock.Unlock,
		commit: func(batch []*op) {
			env.mu.Lock()
			hook := env.hook
			env.mu.Unlock()
			if hook != nil {
				hook(batch)
			}
			keys := make([]string, len(batch))
			for i, o := range batch {
				keys[i] = o.req.Key
				o.kind, o.settled = outcomeApplied, true
			}
			env.mu.Lock()
			env.batches = append(env.batches, keys)
			env.mu.Unlock()
		},
	}, maxSize)
	return g, env
}

func (e *fakeEnv) setHook(hook func([]*op)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hook = hook
}

func (e *fakeEnv) sizes() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n []int
	for _, b := range e.batches {
		n = append(n, len(b))
	}
	return n
}

func fakeOp(ctx context.Context, key string) *op {
	return &op{ctx: ctx, req: &Request{Handler: "h", Key: key}}
}

func queued(g *group) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.mu.queue)
}

// submitAll submits ops, each from its own goroutine, and returns a
// function that waits for all of them.
func submitAll(g *group, ops ...*op) (wait func()) {
	var wg sync.WaitGroup
	for _, o := range ops {
		wg.Go(func() { g.submit(o) })
	}
	return wg.Wait
}

// startHeldLeader submits a leader whose commit blocks until release is
// closed, and returns once that commit has begun.
func startHeldLeader(g *group, env *fakeEnv) (waitLeader func(), release chan struct{}) {
	entered, release := holdFirstCommit(env)
	waitLeader = submitAll(g, fakeOp(context.Background(), "leader"))
	<-entered
	return waitLeader, release
}

// holdFirstCommit makes the next commit block until release is closed, and
// returns a channel closed once it has begun.
func holdFirstCommit(env *fakeEnv) (entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	env.setHook(func([]*op) {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	return entered, release
}

// TestGroupSharesOneCommitAmongTheCallersThatQueued: while a commit runs,
// callers queue; the next leader takes them all in one commit, up to
// maxSize.
func TestGroupSharesOneCommitAmongTheCallersThatQueued(t *testing.T) {
	for _, tc := range []struct{ followers, maxSize int }{{7, 1000}, {9, 4}} {
		t.Run(fmt.Sprint(tc), func(t *testing.T) {
			g, env := newFakeGroup(t, tc.maxSize)
			waitLeader, release := startHeldLeader(g, env)
			ctx := context.Background()
			ops := make([]*op, tc.followers)
			for i := range ops {
				ops[i] = fakeOp(ctx, fmt.Sprint(i))
			}
			waitFollowers := submitAll(g, ops...)
			require.Eventually(t, func() bool { return queued(g) == tc.followers }, 10*time.Second, time.Millisecond)
			close(release)
			waitLeader()
			waitFollowers()
			sizes := env.sizes()
			require.Equal(t, 1, sizes[0])
			total := 0
			for _, n := range sizes[1:] {
				require.LessOrEqual(t, n, tc.maxSize)
				total += n
			}
			require.Equal(t, tc.followers, total)
			require.Len(t, sizes, 1+(tc.followers+tc.maxSize-1)/tc.maxSize, "the queued callers share as few commits as maxSize allows")
			for _, o := range ops {
				require.True(t, o.settled)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			require.False(t, g.mu.leading, "no leader is left behind")
		})
	}
}

// TestGroupCallerWhoseContextEndsLeavesTheQueue: a queued caller whose
// context ends returns at once with its error and is never committed; the
// others are.
func TestGroupCallerWhoseContextEndsLeavesTheQueue(t *testing.T) {
	g, env := newFakeGroup(t, 1000)
	waitLeader, release := startHeldLeader(g, env)
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	quitter := fakeOp(cctx, "quitter")
	stay := []*op{fakeOp(ctx, "a"), fakeOp(ctx, "b")}
	waitStay := submitAll(g, stay[0])
	require.Eventually(t, func() bool { return queued(g) == 1 }, 10*time.Second, time.Millisecond)
	quit := make(chan struct{})
	go func() { defer close(quit); g.submit(quitter) }()
	require.Eventually(t, func() bool { return queued(g) == 2 }, 10*time.Second, time.Millisecond)
	waitStay2 := submitAll(g, stay[1])
	require.Eventually(t, func() bool { return queued(g) == 3 }, 10*time.Second, time.Millisecond)
	cancel()
	select {
	case <-quit:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "a cancelled caller kept waiting in the queue")
	}
	require.True(t, quitter.settled)
	require.ErrorIs(t, quitter.err, context.Canceled)
	require.Equal(t, outcomeAborted, quitter.kind)
	require.Equal(t, 2, queued(g))
	close(release)
	waitLeader()
	waitStay()
	waitStay2()
	env.mu.Lock()
	defer env.mu.Unlock()
	require.Equal(t, [][]string{{"leader"}, {"a", "b"}}, env.batches)
}

// TestGroupLeaderWhoseContextEndsHandsTheLeadOn: a leader waiting for the
// write lock gives up when its context ends, and the caller queued behind
// it leads the next commit.
func TestGroupLeaderWhoseContextEndsHandsTheLeadOn(t *testing.T) {
	g, env := newFakeGroup(t, 1000)
	env.lock.Lock() // another writer holds the lock
	cctx, cancel := context.WithCancel(context.Background())
	leader := fakeOp(cctx, "leader")
	leaderDone := make(chan struct{})
	go func() { defer close(leaderDone); g.submit(leader) }()
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.mu.leading
	}, 10*time.Second, time.Millisecond)
	follower := fakeOp(context.Background(), "follower")
	waitFollower := submitAll(g, follower)
	require.Eventually(t, func() bool { return queued(g) == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	select {
	case <-leaderDone:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "a cancelled leader kept waiting for the write lock")
	}
	require.ErrorIs(t, leader.err, context.Canceled)
	env.lock.Unlock()
	waitFollower()
	require.True(t, follower.settled)
	require.Equal(t, outcomeApplied, follower.kind)
	require.Equal(t, []int{1}, env.sizes())
}

// TestGroupKeepsNoSettledOpReachable: once every caller has returned,
// neither the queue's nor the leader's buffer holds an op (a settled
// request's payload and response must not stay in memory until the next
// write).
func TestGroupKeepsNoSettledOpReachable(t *testing.T) {
	g, env := newFakeGroup(t, 3)
	waitLeader, release := startHeldLeader(g, env)
	ctx := context.Background()
	ops := make([]*op, 7)
	for i := range ops {
		ops[i] = fakeOp(ctx, fmt.Sprint(i))
	}
	waitFollowers := submitAll(g, ops...)
	require.Eventually(t, func() bool { return queued(g) == len(ops) }, 10*time.Second, time.Millisecond)
	close(release)
	waitLeader()
	waitFollowers()
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Empty(t, g.mu.queue)
	for i, o := range g.mu.queue[:cap(g.mu.queue)] {
		require.Nil(t, o, "queue slot %d", i)
	}
	for i, o := range g.batch[:cap(g.batch)] {
		require.Nil(t, o, "batch slot %d", i)
	}
}

// TestGroupCommitThatPanicsReleasesItsFollowers: if the commit itself
// panics (a bug), the leader's caller gets the panic, every follower of
// the batch is settled with an error instead of waiting forever, and the
// group takes the next caller.
func TestGroupCommitThatPanicsReleasesItsFollowers(t *testing.T) {
	g, env := newFakeGroup(t, 1000)
	entered, release := make(chan struct{}), make(chan struct{})
	var calls int
	env.setHook(func(batch []*op) {
		calls++
		switch calls {
		case 1:
			close(entered)
			<-release
		case 2:
			panic("commit bug")
		}
	})
	ctx := context.Background()
	waitFirst := submitAll(g, fakeOp(ctx, "first"))
	<-entered
	promoted, follower := fakeOp(ctx, "promoted"), fakeOp(ctx, "follower")
	panicked := make(chan any, 2)
	var wg sync.WaitGroup
	for _, o := range []*op{promoted, follower} {
		wg.Go(func() {
			defer func() { panicked <- recover() }()
			g.submit(o)
		})
		require.Eventually(t, func() bool { return queued(g) >= 1 }, 10*time.Second, time.Millisecond)
	}
	require.Eventually(t, func() bool { return queued(g) == 2 }, 10*time.Second, time.Millisecond)
	close(release)
	waitFirst()
	wg.Wait()
	close(panicked)
	var panics []any
	for p := range panicked {
		if p != nil {
			panics = append(panics, p)
		}
	}
	require.Equal(t, []any{"commit bug"}, panics, "only the leader's caller panics")
	require.True(t, errors.Is(follower.err, errLeaderGone))
	last := fakeOp(ctx, "last")
	g.submit(last)
	require.Equal(t, outcomeApplied, last.kind)
}

// TestGatherEndsWhenNobodyComesBack: a leader that waits for the callers
// of the last commit stops waiting after a tenth of that commit's time.
func TestGatherEndsWhenNobodyComesBack(t *testing.T) {
	g, env := newFakeGroup(t, 1000)
	g.mu.last, g.mu.lastTook = 8, 20*time.Millisecond
	done := make(chan struct{})
	go func() { defer close(done); g.submit(fakeOp(context.Background(), "alone")) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the gathering leader never committed")
	}
	require.Equal(t, []int{1}, env.sizes())
}

// TestGroupCommitTakesWhatArrivedDuringTheFlush is the same through a real
// DB: the leader's commit is held inside its effect until seven more
// callers have queued, then those seven share the next commit: two commits
// for eight Apply calls (bbolt's Batch would have waited for 1000 calls or
// 10 ms).
func TestGroupCommitTakesWhatArrivedDuringTheFlush(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "g.db"), &Options{NoSync: true, ExpireInterval: -1})
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()

	entered, release := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := db.Apply(ctx, Request{Handler: "h", Key: "leader"}, func(*Tx) ([]byte, error) {
			close(entered)
			<-release
			return nil, nil
		})
		errs <- err
	})
	<-entered
	before := db.Stats().Commits
	for i := range 7 {
		wg.Go(func() {
			_, err := db.Apply(ctx, Request{Handler: "h", Key: fmt.Sprint("follower-", i)}, nil)
			errs <- err
		})
	}
	require.Eventually(t, func() bool { return queued(&db.group) == 7 }, 10*time.Second, time.Millisecond,
		"seven callers queue behind the running commit")
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, uint64(2), db.Stats().Commits-before,
		"the leader's commit, then one commit for the seven that queued")
	require.Equal(t, uint64(8), db.Stats().Total.Applied)
	db.group.mu.Lock()
	require.False(t, db.group.mu.leading, "no leader is left behind")
	db.group.mu.Unlock()
}
