package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// outcomes collects what an Applier's done callbacks were given, in the
// order they were called.
type outcomes struct {
	mu   sync.Mutex
	got  []outcome
	seen chan struct{} // receives once per done call
}

type outcome struct {
	id  int
	res oncekv.Result
	err error
}

func newOutcomes() *outcomes { return &outcomes{seen: make(chan struct{}, 1<<10)} }

// done returns the done callback of request id.
func (o *outcomes) done(id int) func(oncekv.Result, error) {
	return func(res oncekv.Result, err error) {
		o.mu.Lock()
		o.got = append(o.got, outcome{id, res, err})
		o.mu.Unlock()
		o.seen <- struct{}{}
	}
}

func (o *outcomes) all() []outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]outcome(nil), o.got...)
}

// ids lists the requests done, in the order their done ran.
func (o *outcomes) ids() []int {
	var ids []int
	for _, g := range o.all() {
		ids = append(ids, g.id)
	}
	return ids
}

func newApplier(t *testing.T, db *oncekv.DB, opts oncekv.ApplierOptions) *oncekv.Applier {
	t.Helper()
	a, err := db.NewApplier(opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return a
}

func TestApplierAppliesOnceAndCallsDoneInSubmissionOrder(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{MaxInFlight: 8})
	ctx := context.Background()
	got := newOutcomes()
	const n = 100
	for i := range n {
		req := oncekv.Request{Handler: "deposit", Key: fmt.Sprint("k", i)}
		require.NoError(t, a.Submit(ctx, req, deposit("alice", 1), got.done(i)))
	}
	require.NoError(t, a.Flush(ctx))
	all := got.all()
	require.Len(t, all, n)
	for i, g := range all {
		require.Equal(t, i, g.id, "done runs in submission order")
		require.NoError(t, g.err)
		require.False(t, g.res.Duplicate)
		// The effects ran in submission order: each saw the ones before it.
		require.Equal(t, fmt.Sprintf("alice=%d", i+1), string(g.res.Response))
	}
	require.Equal(t, uint64(n), balance(t, db, "alice"))
	require.Less(t, db.Stats().Commits, uint64(n), "requests in flight share commits")

	// Every later delivery is a duplicate, from Apply and from the Applier.
	dup, err := db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "k7"}, deposit("alice", 1))
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, "alice=8", string(dup.Response))
	again := newOutcomes()
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "deposit", Key: "k7"}, deposit("alice", 1), again.done(0)))
	require.NoError(t, a.Flush(ctx))
	require.True(t, again.all()[0].res.Duplicate)
	require.Equal(t, "alice=8", string(again.all()[0].res.Response))
	require.Equal(t, uint64(n), balance(t, db, "alice"))
}

// TestApplierDoneComesAfterTheCommit: when done runs, a new read already
// sees what the request's effect wrote: its commit has returned.
func TestApplierDoneComesAfterTheCommit(t *testing.T) {
	db := oncetest.Open(t, nil)
	a := newApplier(t, db, oncekv.ApplierOptions{MaxInFlight: 16})
	ctx := context.Background()
	var mu sync.Mutex
	var problems []string
	for i := range 64 {
		key := fmt.Sprint("k", i)
		req := oncekv.Request{Handler: "h", Key: key}
		require.NoError(t, a.Submit(ctx, req, deposit(key, 1), func(res oncekv.Result, err error) {
			bad := func(format string, args ...any) {
				mu.Lock()
				problems = append(problems, fmt.Sprintf(key+": "+format, args...))
				mu.Unlock()
			}
			if err != nil {
				bad("%v", err)
				return
			}
			if err := db.View(func(tx *oncekv.Tx) error {
				if b := tx.Bucket(accounts); b == nil || readUint(b.Get([]byte(key))) != 1 {
					bad("done ran before its effect was visible")
				}
				return nil
			}); err != nil {
				bad("view: %v", err)
			}
		}))
	}
	require.NoError(t, a.Flush(ctx))
	require.Empty(t, problems)
}

// TestApplierDuplicatesAndKeyReuseInOneWindow submits deliveries of one
// key, and one with another payload, while the first is still in flight
// (all wait behind a held write lock and share a commit): the effect runs
// once, the other deliveries are duplicates with its response, and the
// other payload is ErrKeyReuse, as Apply one after another would answer.
func TestApplierDuplicatesAndKeyReuseInOneWindow(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{})
	ctx := context.Background()
	release := holdWriteLock(t, db)
	got := newOutcomes()
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}
	other := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("other")}
	require.NoError(t, a.Submit(ctx, req, deposit("alice", 5), got.done(0)))
	require.NoError(t, a.Submit(ctx, req, deposit("alice", 5), got.done(1)))
	require.NoError(t, a.Submit(ctx, other, deposit("alice", 5), got.done(2)))
	require.NoError(t, a.Submit(ctx, req, deposit("alice", 5), got.done(3)))
	require.Equal(t, 3, oncekv.QueuedApplies(db), "the first leads, waiting for the lock; the others are queued behind it")
	commits := db.Stats().Commits
	release()
	require.NoError(t, a.Flush(ctx))

	all := got.all()
	require.Equal(t, []int{0, 1, 2, 3}, got.ids())
	require.NoError(t, all[0].err)
	require.False(t, all[0].res.Duplicate)
	require.Equal(t, "alice=5", string(all[0].res.Response))
	for _, i := range []int{1, 3} {
		require.NoError(t, all[i].err)
		require.True(t, all[i].res.Duplicate)
		require.Equal(t, all[0].res.Response, all[i].res.Response)
		require.True(t, all[0].res.FirstSeen.Equal(all[i].res.FirstSeen))
	}
	require.ErrorIs(t, all[2].err, oncekv.ErrKeyReuse)
	var re *oncekv.RequestError
	require.ErrorAs(t, all[2].err, &re)
	require.Equal(t, "k", re.Key)
	require.Equal(t, uint64(5), balance(t, db, "alice"))
	require.Equal(t, commits+2, db.Stats().Commits, "the held Update's commit, then one for all four")
}

// TestApplierEffectErrors: an effect error fails its request only, with
// nothing recorded (the key applies later); a permanent one records the
// key FAILED; the requests around them in the same commit are applied.
func TestApplierEffectErrors(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{})
	ctx := context.Background()
	errTransient, errDeclined := errors.New("transient"), errors.New("declined")
	release := holdWriteLock(t, db)
	got := newOutcomes()
	submit := func(id int, key string, effect func(*oncekv.Tx) ([]byte, error)) {
		require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: key}, effect, got.done(id)))
	}
	failing := func(err error) func(*oncekv.Tx) ([]byte, error) {
		return func(tx *oncekv.Tx) ([]byte, error) {
			if _, err := deposit("alice", 100)(tx); err != nil {
				return nil, err
			}
			return nil, err // after writing: the write must be undone
		}
	}
	submit(0, "a", deposit("alice", 1))
	submit(1, "b", failing(errTransient))
	submit(2, "c", deposit("alice", 1))
	submit(3, "d", failing(oncekv.Permanent(errDeclined)))
	submit(4, "e", deposit("alice", 1))
	release()
	require.NoError(t, a.Flush(ctx))

	all := got.all()
	require.Equal(t, []int{0, 1, 2, 3, 4}, got.ids())
	require.Equal(t, "alice=1", string(all[0].res.Response))
	require.ErrorIs(t, all[1].err, errTransient)
	require.Equal(t, "alice=2", string(all[2].res.Response), "the failed effect's writes were undone")
	var fe *oncekv.FailedError
	require.ErrorAs(t, all[3].err, &fe)
	require.ErrorIs(t, all[3].err, errDeclined)
	require.Equal(t, "alice=3", string(all[4].res.Response))
	require.Equal(t, uint64(3), balance(t, db, "alice"))

	// b recorded nothing and applies now; d replays its failure.
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "b"}, deposit("alice", 1))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "d"}, deposit("alice", 1))
	require.ErrorAs(t, err, &fe)
	require.Equal(t, uint64(4), balance(t, db, "alice"))
}

func TestApplierBadInputGoesToDone(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{})
	ctx := context.Background()
	got := newOutcomes()
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h"}, deposit("alice", 1), got.done(0)))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Key: "k"}, deposit("alice", 1), got.done(1)))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "k"}, deposit("alice", 1), got.done(2)))
	require.NoError(t, a.Flush(ctx))
	all := got.all()
	require.ErrorIs(t, all[0].err, oncekv.ErrKeyRequired)
	require.ErrorIs(t, all[1].err, oncekv.ErrHandlerRequired)
	var re *oncekv.RequestError
	require.ErrorAs(t, all[0].err, &re)
	require.NoError(t, all[2].err)
	require.Equal(t, uint64(1), balance(t, db, "alice"))
	require.Equal(t, uint64(2), db.Stats().Total.InvalidRequests)
}

func TestNewApplierRejectsBadOptionsAndClosedDB(t *testing.T) {
	db, err := oncekv.Open(t.TempDir()+"/a.db", &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	_, err = db.NewApplier(oncekv.ApplierOptions{MaxInFlight: -1})
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	require.ErrorContains(t, err, "MaxInFlight")
	require.NoError(t, db.Close())
	_, err = db.NewApplier(oncekv.ApplierOptions{})
	require.ErrorIs(t, err, oncekv.ErrClosed)
}

// TestApplierBackPressure: with MaxInFlight requests in flight, Submit
// blocks until one is done, or returns ctx's error (its done never runs).
func TestApplierBackPressure(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{MaxInFlight: 2})
	ctx := context.Background()
	release := holdWriteLock(t, db)
	got := newOutcomes()
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "1"}, deposit("alice", 1), got.done(1)))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "2"}, deposit("alice", 1), got.done(2)))

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err := a.Submit(short, oncekv.Request{Handler: "h", Key: "3"}, deposit("alice", 1), got.done(3))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var re *oncekv.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "3", re.Key)

	submitted := make(chan error, 1)
	go func() {
		submitted <- a.Submit(ctx, oncekv.Request{Handler: "h", Key: "4"}, deposit("alice", 1), got.done(4))
	}()
	select {
	case err := <-submitted:
		t.Fatalf("Submit returned (%v) with two requests in flight of two", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	require.NoError(t, <-submitted)
	require.NoError(t, a.Flush(ctx))
	require.Equal(t, []int{1, 2, 4}, got.ids(), "the refused request's done never ran")
	require.Equal(t, uint64(3), balance(t, db, "alice"))
}

// TestApplierHonoursContextWhileQueued: a request whose ctx ends before
// its commit takes it applies nothing and gets ctx's error, whether it is
// the one leading (waiting for the lock) or queued behind others.
func TestApplierHonoursContextWhileQueued(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{})
	ctx := context.Background()
	release := holdWriteLock(t, db)
	got := newOutcomes()
	first, cancelFirst := context.WithCancel(ctx)
	middle, cancelMiddle := context.WithCancel(ctx)
	require.NoError(t, a.Submit(first, oncekv.Request{Handler: "h", Key: "first"}, deposit("alice", 1), got.done(0)))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "second"}, deposit("alice", 1), got.done(1)))
	require.NoError(t, a.Submit(middle, oncekv.Request{Handler: "h", Key: "middle"}, deposit("alice", 1), got.done(2)))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "last"}, deposit("alice", 1), got.done(3)))
	cancelFirst()
	<-got.seen // the leader gives up waiting for the lock at once
	require.Equal(t, []int{0}, got.ids())
	cancelMiddle()
	release()
	require.NoError(t, a.Flush(ctx))
	all := got.all()
	require.Equal(t, []int{0, 1, 2, 3}, got.ids())
	require.ErrorIs(t, all[0].err, context.Canceled)
	require.NoError(t, all[1].err)
	require.ErrorIs(t, all[2].err, context.Canceled)
	require.NoError(t, all[3].err)
	require.Equal(t, uint64(2), balance(t, db, "alice"))
	for _, key := range []string{"first", "middle"} {
		res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, deposit("alice", 1))
		require.NoError(t, err)
		require.False(t, res.Duplicate, "%s applied nothing", key)
	}
}

// TestApplierCloseWaitsForRequestsInFlight: Close returns once every
// request in flight is done; a Submit waiting for room, and any later
// one, gets ErrClosed.
func TestApplierCloseWaitsForRequestsInFlight(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a, err := db.NewApplier(oncekv.ApplierOptions{MaxInFlight: 3})
	require.NoError(t, err)
	ctx := context.Background()
	release := holdWriteLock(t, db)
	got := newOutcomes()
	for i := range 3 {
		require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint(i)}, deposit("alice", 1), got.done(i)))
	}
	waiting := make(chan error, 1)
	go func() {
		waiting <- a.Submit(ctx, oncekv.Request{Handler: "h", Key: "waiting"}, deposit("alice", 1), got.done(9))
	}()
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	require.ErrorIs(t, <-waiting, oncekv.ErrClosed)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with three requests in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	require.NoError(t, <-closed)
	require.Equal(t, []int{0, 1, 2}, got.ids())
	for _, g := range got.all() {
		require.NoError(t, g.err)
	}
	require.Equal(t, uint64(3), balance(t, db, "alice"))
	require.ErrorIs(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "late"}, nil, nil), oncekv.ErrClosed)
	require.NoError(t, a.Close(), "a second Close")
	require.NoError(t, a.Flush(ctx), "nothing is in flight")
}

// TestDBCloseWaitsForApplierRequests: DB.Close waits for the requests an
// Applier has in flight, which commit; later ones get ErrClosed.
func TestDBCloseWaitsForApplierRequests(t *testing.T) {
	path := t.TempDir() + "/a.db"
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	a, err := db.NewApplier(oncekv.ApplierOptions{})
	require.NoError(t, err)
	ctx := context.Background()
	got := newOutcomes()
	for i := range 50 {
		require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint(i)}, deposit("alice", 1), got.done(i)))
	}
	require.NoError(t, db.Close())
	require.Len(t, got.all(), 50)
	for _, g := range got.all() {
		require.NoError(t, g.err)
	}
	require.ErrorIs(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "late"}, nil, nil), oncekv.ErrClosed)
	require.NoError(t, a.Close())

	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	require.Equal(t, uint64(50), balance(t, db, "alice"))
	require.NoError(t, db.Close())
}

// TestApplierRaisesAnEffectsPanicInTheSubmitter: as Apply raises an
// effect's panic in its caller, the Applier raises it, value unchanged, in
// the next Submit or Flush; the request records nothing and gets no done,
// and the requests around it are applied.
func TestApplierRaisesAnEffectsPanicInTheSubmitter(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{})
	ctx := context.Background()
	type boom struct{ n int }
	release := holdWriteLock(t, db)
	got := newOutcomes()
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "a"}, deposit("alice", 1), got.done(0)))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "b"}, func(tx *oncekv.Tx) ([]byte, error) {
		if _, err := deposit("alice", 100)(tx); err != nil {
			return nil, err
		}
		panic(&boom{7})
	}, got.done(1)))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "c"}, deposit("alice", 1), got.done(2)))
	release()
	var raised any
	func() {
		defer func() { raised = recover() }()
		_ = a.Flush(ctx)
	}()
	require.Equal(t, &boom{7}, raised)
	require.NoError(t, a.Flush(ctx), "raised once")
	require.Equal(t, []int{0, 2}, got.ids())
	require.Equal(t, uint64(2), balance(t, db, "alice"))
	require.Equal(t, uint64(1), db.Stats().Handlers["h"].EffectErrors)

	// The Applier goes on; the key recorded nothing.
	again := newOutcomes()
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "b"}, deposit("alice", 1), again.done(0)))
	require.NoError(t, a.Flush(ctx))
	require.NoError(t, again.all()[0].err)
	require.False(t, again.all()[0].res.Duplicate)

	// A panic raised by the next Submit, before it takes
	// its request: once e is done, d's panic is recorded (done runs in
	// order). Both wait behind a held lock, so e is taken before d runs.
	release = holdWriteLock(t, db)
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "d"}, func(*oncekv.Tx) ([]byte, error) { panic("lone") }, again.done(1)))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "e"}, nil, again.done(2)))
	release()
	for range 2 {
		<-again.seen // a's second delivery, then e
	}
	func() {
		defer func() { raised = recover() }()
		_ = a.Submit(ctx, oncekv.Request{Handler: "h", Key: "f"}, nil, again.done(3))
	}()
	require.Equal(t, "lone", raised)
	require.NoError(t, a.Flush(ctx))
	require.Equal(t, []int{0, 2}, again.ids(), "d got no done, f was not taken")
}

// TestApplierGoexitInEffectOrDone: a runtime.Goexit (t.FailNow) in an
// effect or in a done ends the goroutine that next calls Flush, as Apply's
// caller's would end; the Applier goes on, and Close does not hang.
func TestApplierGoexitInEffectOrDone(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{})
	ctx := context.Background()
	flushEnds := func() (returned bool) {
		ended := make(chan bool)
		go func() {
			ret := false
			defer func() { ended <- ret }()
			_ = a.Flush(ctx)
			ret = true
		}()
		return <-ended
	}
	got := newOutcomes()
	// Each pair waits behind a held lock, so its second request is taken
	// before the first one's Goexit is recorded (a Submit after it would
	// raise it).
	release := holdWriteLock(t, db)
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "effect"}, func(*oncekv.Tx) ([]byte, error) {
		runtime.Goexit()
		return nil, nil
	}, got.done(0)))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "ok"}, deposit("alice", 1), got.done(1)))
	release()
	require.False(t, flushEnds(), "Flush ended its goroutine")
	require.True(t, flushEnds(), "raised once")

	release = holdWriteLock(t, db)
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "done"}, deposit("alice", 1), func(oncekv.Result, error) {
		runtime.Goexit()
	}))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "after"}, deposit("alice", 1), got.done(2)))
	release()
	require.False(t, flushEnds(), "Flush ended its goroutine")
	require.Equal(t, []int{1, 2}, got.ids(), "the request after a done's Goexit is done too")
	require.Equal(t, uint64(3), balance(t, db, "alice"), "a Goexit in done comes after its commit")

	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "effect"}, nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "the Goexit's request recorded nothing")
}

// TestApplierPanicInDone: a done's panic is raised by the next Flush; the
// requests after it are done.
func TestApplierPanicInDone(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{})
	ctx := context.Background()
	got := newOutcomes()
	release := holdWriteLock(t, db) // b is taken before a's done panics
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "a"}, deposit("alice", 1), func(oncekv.Result, error) { panic("in done") }))
	require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: "b"}, deposit("alice", 1), got.done(1)))
	release()
	require.PanicsWithValue(t, "in done", func() { _ = a.Flush(ctx) })
	require.Equal(t, []int{1}, got.ids())
	require.Equal(t, uint64(2), balance(t, db, "alice"))
}

// TestApplierWithConcurrentApply: an Applier's requests and concurrent
// Apply calls share the group commit; each key applies once.
func TestApplierWithConcurrentApply(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	a := newApplier(t, db, oncekv.ApplierOptions{MaxInFlight: 16})
	ctx := context.Background()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for w := range 4 {
		wg.Go(func() {
			for i := range n {
				key := fmt.Sprint("k", i*4+w)
				if _, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, deposit("alice", 1)); err != nil {
					errs <- err
				}
			}
		})
	}
	got := newOutcomes()
	for i := range 2 * n {
		require.NoError(t, a.Submit(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint("k", 400+2*i)}, deposit("alice", 1), got.done(i)))
	}
	wg.Wait()
	require.NoError(t, a.Flush(ctx))
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, g := range got.all() {
		require.NoError(t, g.err)
	}
	// Apply's keys k0..k799 and the Applier's even keys k400..k1198
	// (half of them Apply's too): 1000 keys, each applied once.
	require.Equal(t, uint64(1000), balance(t, db, "alice"))
}

// pipelined is one request of TestPropertyApplierEqualsSequentialApply.
type pipelined struct {
	Key     string // "" is bad input
	Payload string // another payload of a key is ErrKeyReuse
	Effect  string // "deposit", "nil", "error", "permanent"
	Amount  uint64
	Hold    int  // before this request, hold the write lock for that many requests
	Flush   bool // after this request, wait for every done
}

func (p pipelined) request() oncekv.Request {
	return oncekv.Request{Handler: "h", Key: p.Key, Payload: []byte(p.Payload)}
}

// effect writes before it fails, so that a failure must be rolled back.
func (p pipelined) effect() func(*oncekv.Tx) ([]byte, error) {
	if p.Effect == "nil" {
		return nil
	}
	return func(tx *oncekv.Tx) ([]byte, error) {
		resp, err := deposit("acct", p.Amount)(tx)
		switch {
		case err != nil:
			return nil, err
		case p.Effect == "error":
			return nil, fmt.Errorf("transient %s", p.Key)
		case p.Effect == "permanent":
			return nil, oncekv.Permanent(fmt.Errorf("declined %s", p.Key))
		}
		return resp, nil
	}
}

// seen is what a request's result says, less its times.
func seen(res oncekv.Result, err error) string {
	return fmt.Sprintf("resp=%q dup=%v expired=%v err=%v", res.Response, res.Duplicate, res.ResponseExpired, err)
}

// TestPropertyApplierEqualsSequentialApply: a sequence of requests (keys
// repeating, other payloads, effects that succeed, record nothing, fail or
// fail permanently, bad input) gives through one Applier exactly the
// results Apply gives one call after another, in the same order, the same
// user data and the same counters, whatever MaxInFlight and however the
// requests fall into commits (Flush points, a held write lock that lines
// several up for one commit).
func TestPropertyApplierEqualsSequentialApply(t *testing.T) {
	dir := t.TempDir()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(rt, "n")
		reqs := make([]pipelined, n)
		for i := range reqs {
			reqs[i] = pipelined{
				Key:     rapid.SampledFrom([]string{"k0", "k1", "k2", "k3", "k4", "k5", ""}).Draw(rt, "key"),
				Payload: rapid.SampledFrom([]string{"p", "p", "p", "q"}).Draw(rt, "payload"),
				Effect:  rapid.SampledFrom([]string{"deposit", "deposit", "deposit", "nil", "error", "permanent"}).Draw(rt, "effect"),
				Amount:  rapid.Uint64Range(1, 100).Draw(rt, "amount"),
				Hold:    rapid.SampledFrom([]int{0, 0, 0, 0, 2, 5}).Draw(rt, "hold"),
				Flush:   rapid.IntRange(0, 9).Draw(rt, "flush") == 0,
			}
		}
		maxInFlight := rapid.IntRange(1, 16).Draw(rt, "maxInFlight")
		ctx := context.Background()
		open := func(name string) *oncekv.DB {
			run++
			db, err := oncekv.Open(fmt.Sprintf("%s/%s-%d.db", dir, name, run), &oncekv.Options{NoSync: true, ExpireInterval: -1})
			if err != nil {
				rt.Fatal(err)
			}
			return db
		}

		seq := open("seq")
		defer seq.Close()
		var want []string
		for _, r := range reqs {
			res, err := seq.Apply(ctx, r.request(), r.effect())
			want = append(want, seen(res, err))
		}

		db := open("pipe")
		defer db.Close()
		a, err := db.NewApplier(oncekv.ApplierOptions{MaxInFlight: maxInFlight})
		if err != nil {
			rt.Fatal(err)
		}
		got := make([]string, n)
		var order []int
		var mu sync.Mutex
		var release func()
		holding := 0
		for i, r := range reqs {
			if r.Hold > 0 && release == nil && r.Hold <= maxInFlight {
				// Nothing in flight, so that the held requests all fit.
				if err := a.Flush(ctx); err != nil {
					rt.Fatal(err)
				}
				release, holding = holdLock(db), r.Hold
			}
			if err := a.Submit(ctx, r.request(), r.effect(), func(res oncekv.Result, err error) {
				mu.Lock()
				defer mu.Unlock()
				got[i] = seen(res, err)
				order = append(order, i)
			}); err != nil {
				rt.Fatal(err)
			}
			if holding--; release != nil && holding <= 0 {
				release()
				release = nil
			}
			if r.Flush && release == nil {
				if err := a.Flush(ctx); err != nil {
					rt.Fatal(err)
				}
			}
		}
		if release != nil {
			release()
		}
		if err := a.Close(); err != nil {
			rt.Fatal(err)
		}
		for i := range n {
			if order[i] != i {
				rt.Fatalf("done order %v", order)
			}
			if got[i] != want[i] {
				rt.Fatalf("request %d %+v: Applier gave %s, sequential Apply %s", i, reqs[i], got[i], want[i])
			}
		}
		if s, p := userState(t, seq), userState(t, db); fmt.Sprint(s) != fmt.Sprint(p) {
			rt.Fatalf("user data differ: sequential %v, Applier %v", s, p)
		}
		if s, p := countersOf(seq), countersOf(db); s != p {
			rt.Fatalf("counters differ: sequential %s, Applier %s", s, p)
		}
	})
}

// holdLock holds db's write lock, as holdWriteLock does, for a rapid test.
func holdLock(db *oncekv.DB) (release func()) {
	held, free, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		_ = db.Update(func(*oncekv.Tx) error {
			close(held)
			<-free
			return nil
		})
	}()
	<-held
	return func() {
		close(free)
		<-finished
	}
}

// countersOf is db's outcome counters, those a request's result moves.
func countersOf(db *oncekv.DB) string {
	c := db.Stats().Total
	return fmt.Sprintf("applied=%d dup=%d reuse=%d failedRec=%d failedRep=%d effectErr=%d invalid=%d aborted=%d",
		c.Applied, c.DuplicatesSuppressed, c.KeyReuses, c.FailedRecorded, c.FailedReplayed, c.EffectErrors, c.InvalidRequests, c.Aborted)
}
