package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// The tests in this file check that user code (effects, the errors they
// return, callbacks) cannot wedge or poison the store: a panic raised while
// oncekv inspects a user value, or a runtime.Goexit inside an effect, ends
// the caller whose code did it and leaves the store and every other caller
// as they were. A store that wedges would hang these tests, so every wait
// has a timeout and the store is opened without a Close in t.Cleanup.

// hangLimit is how long a test waits for something that must happen before
// it calls the store wedged. It bounds a hang, it is not a speed target.
const hangLimit = 20 * time.Second

// openUnchecked opens a store whose Close the test calls itself (under a
// timeout), so that a wedged store fails the test instead of hanging it.
func openUnchecked(t *testing.T) *oncekv.DB {
	t.Helper()
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "u.db"), &oncekv.Options{NoSync: true, ExpireInterval: -1})
	require.NoError(t, err)
	return db
}

// within runs fn in its own goroutine and waits for it at most hangLimit.
// It returns whether fn returned normally (false when it called
// runtime.Goexit or panicked) and the panic value, if any. A hang is
// reported with t.Errorf, which is safe from any goroutine, and as hung.
func within(t *testing.T, what string, fn func()) (returned bool, panicked any, hung bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { panicked = recover() }()
		fn()
		returned = true
	}()
	select {
	case <-done:
		return returned, panicked, false
	case <-time.After(hangLimit):
		t.Errorf("wedged: %s did not return within %v", what, hangLimit)
		return false, nil, true
	}
}

// mustWithin is within for the test's own goroutine: a hang ends the test.
func mustWithin(t *testing.T, what string, fn func()) (returned bool, panicked any) {
	t.Helper()
	returned, panicked, hung := within(t, what, fn)
	if hung {
		t.FailNow()
	}
	return returned, panicked
}

// requireCallerPanics runs call and checks that it panicked in its caller's
// goroutine, then that the store is still healthy.
func requireCallerPanics(t *testing.T, db *oncekv.DB, what string, call func()) {
	t.Helper()
	returned, p := mustWithin(t, what, call)
	require.False(t, returned)
	require.NotNil(t, p, "the panic is raised in the caller")
	requireHealthy(t, db, "next")
}

// requireHealthy checks that the store still takes writes and closes.
func requireHealthy(t *testing.T, db *oncekv.DB, key string) {
	t.Helper()
	var err error
	mustWithin(t, "Apply after the fault", func() {
		_, err = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key}, deposit("acct", 1))
	})
	require.NoError(t, err, "the store is not poisoned")
	mustWithin(t, "Close after the fault", func() { err = db.Close() })
	require.NoError(t, err)
}

// nilPtrError is an error type whose Error method dereferences its
// receiver: a typed nil of it panics when its message is asked for.
type nilPtrError struct{ msg string }

func (e *nilPtrError) Error() string { return e.msg }

// inspectPanics is an error whose As and Is methods panic, as a buggy
// user error type might.
type inspectPanics struct{}

func (inspectPanics) Error() string { return "inspect panics" }
func (inspectPanics) As(any) bool   { panic("As of a user error") }
func (inspectPanics) Is(error) bool { panic("Is of a user error") }

// TestPanickingErrorValueIsTheCallersPanic: an error value that panics when
// oncekv looks at it (a Permanent typed-nil pointer, an error whose As
// panics) makes the call that returned it panic in its caller's goroutine.
// The store is not reported corrupt or poisoned, and the next write works.
func TestPanickingErrorValueIsTheCallersPanic(t *testing.T) {
	ctx := context.Background()
	var typedNil *nilPtrError
	effects := map[string]error{
		"permanent typed nil": oncekv.Permanent(typedNil),
		"As panics":           inspectPanics{},
		"wrapped As panics":   fmt.Errorf("wrapped: %w", inspectPanics{}),
	}
	for name, bad := range effects {
		t.Run("Apply/"+name, func(t *testing.T) {
			db := openUnchecked(t)
			requireCallerPanics(t, db, "Apply", func() {
				_, _ = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "bad"}, func(*oncekv.Tx) ([]byte, error) { return nil, bad })
			})
		})
		t.Run("ApplyBatch/"+name, func(t *testing.T) {
			db := openUnchecked(t)
			reqs := []oncekv.Request{{Handler: "h", Key: "ok"}, {Handler: "h", Key: "bad"}, {Handler: "h", Key: "ok2"}}
			requireCallerPanics(t, db, "ApplyBatch", func() {
				_, _ = db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
					if i == 1 {
						return nil, bad
					}
					return deposit("acct", 1)(tx)
				})
			})
		})
	}
	t.Run("Update/error Is panics", func(t *testing.T) {
		// Update hands fn's error back without looking into it.
		db := openUnchecked(t)
		var err error
		returned, p := mustWithin(t, "Update", func() {
			err = db.Update(func(*oncekv.Tx) error { return inspectPanics{} })
		})
		require.True(t, returned)
		require.Nil(t, p)
		require.True(t, err == error(inspectPanics{}), "fn's error comes back as it was")
		requireHealthy(t, db, "next")
	})
	t.Run("Claim.Fail/permanent typed nil", func(t *testing.T) {
		db := openUnchecked(t)
		c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "claimed"}, time.Hour)
		require.NoError(t, err)
		returned, p := mustWithin(t, "Claim.Fail", func() { _ = c.Fail(ctx, oncekv.Permanent(typedNil)) })
		require.False(t, returned)
		require.NotNil(t, p)
		// The claim still holds its key and can end normally.
		mustWithin(t, "Claim.Fail", func() { err = c.Fail(ctx, errors.New("transient")) })
		require.NoError(t, err)
		requireHealthy(t, db, "next")
	})
	t.Run("Claim.Complete/effect error As panics", func(t *testing.T) {
		db := openUnchecked(t)
		c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "claimed"}, time.Hour)
		require.NoError(t, err)
		requireCallerPanics(t, db, "Claim.Complete", func() {
			_, _ = c.Complete(ctx, []byte("r"), func(*oncekv.Tx) error { return inspectPanics{} })
		})
	})
}

// TestPanickingErrorInGroupHarmsOnlyItsCaller lines several Apply calls up
// behind a running commit so they share the next one; one returns an error
// whose As panics. That caller panics; the others apply normally.
func TestPanickingErrorInGroupHarmsOnlyItsCaller(t *testing.T) {
	db := openUnchecked(t)
	ctx := context.Background()
	const followers = 5
	const bad = 2
	entered, release := make(chan struct{}), make(chan struct{})
	var leaderErr error
	var leaderDone sync.WaitGroup
	leaderDone.Go(func() {
		_, _, _ = within(t, "leader", func() {
			_, leaderErr = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "leader"}, func(tx *oncekv.Tx) ([]byte, error) {
				close(entered)
				<-release
				return deposit("acct", 1)(tx)
			})
		})
	})
	<-entered
	type outcome struct {
		err      error
		returned bool
		panicked any
	}
	outs := make([]outcome, followers)
	var wg sync.WaitGroup
	for i := range followers {
		wg.Go(func() {
			outs[i].returned, outs[i].panicked, _ = within(t, "follower", func() {
				_, outs[i].err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint("f", i)}, func(tx *oncekv.Tx) ([]byte, error) {
					if i == bad {
						return nil, inspectPanics{}
					}
					return deposit("acct", 1)(tx)
				})
			})
		})
	}
	require.Eventually(t, func() bool { return oncekv.QueuedApplies(db) == followers }, hangLimit, time.Millisecond)
	close(release)
	wg.Wait()
	leaderDone.Wait()
	require.NoError(t, leaderErr)
	for i, o := range outs {
		if i == bad {
			require.False(t, o.returned)
			require.NotNil(t, o.panicked, "the caller whose error panicked gets the panic")
			continue
		}
		require.True(t, o.returned, "follower %d", i)
		require.NoError(t, o.err, "follower %d", i)
	}
	require.Equal(t, uint64(followers), balance(t, db, "acct"), "the leader and every other follower applied")
	requireHealthy(t, db, "next")
}
