package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

func TestCloseWaitsForCallsInFlight(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "wait.db"), &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	inEffect := make(chan struct{})
	release := make(chan struct{})
	applied := make(chan error, 1)
	go func() {
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, func(tx *oncekv.Tx) ([]byte, error) {
			close(inEffect)
			<-release
			return deposit("z", 1)(tx)
		})
		applied <- err
	}()
	<-inEffect
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while an Apply was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-applied)
	require.NoError(t, <-closed)
}

// TestConcurrentCloseReturnsWhenClosed: a Close that finds another Close
// already running waits for it, so the file is free when either returns.
func TestConcurrentCloseReturnsWhenClosed(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.db")
			opts := &oncekv.Options{NoSync: true, ExpireInterval: -1, OpenTimeout: 50 * time.Millisecond}
			db, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			// An Apply in flight keeps the first Close waiting.
			entered, release := make(chan struct{}), make(chan struct{})
			applied := make(chan error, 1)
			go func() {
				_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, func(*oncekv.Tx) ([]byte, error) {
					close(entered)
					<-release
					return nil, nil
				})
				applied <- err
			}()
			<-entered
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { first <- db.Close() }()
			require.Eventually(t, func() bool {
				return errors.Is(db.View(func(*oncekv.Tx) error { return nil }), oncekv.ErrClosed)
			}, hangLimit, time.Millisecond, "the first Close has begun")
			go func() { second <- db.Close() }()
			select {
			case err := <-second:
				// Returned while the first Close still waits: the file
				// must be closed already, or this is the bug.
				require.NoError(t, err)
				reopened, err := oncekv.Open(path, opts)
				require.NoError(t, err, "Close returned before the file was closed")
				require.NoError(t, reopened.Close())
			case <-time.After(time.Duration(10*(round+1)) * time.Millisecond):
			}
			close(release)
			require.NoError(t, <-applied)
			require.NoError(t, <-first)
			require.NoError(t, <-second)
			reopened, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			require.NoError(t, reopened.Close())
		})
	}
}

// TestCloseWritesOnlyWhatChanged: opening and closing a store untouched
// leaves the file as it was (no commit, no fsync); once the store's clock
// has read past what the file holds, Close saves it, so a clock stepped
// back across the restart does not turn the store's clock back.
func TestCloseWritesOnlyWhatChanged(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	path := seedStore(t, clock.Now)
	clock.Advance(time.Hour)
	before := statFile(t, path)
	db, err := oncekv.Open(path, &oncekv.Options{Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Zero(t, db.Stats().Commits, "Close committed nothing")
	after := statFile(t, path)
	require.Equal(t, before.mtime, after.mtime)
	require.True(t, string(before.bytes) == string(after.bytes), "the file is byte for byte as it was")

	db, err = oncekv.Open(path, &oncekv.Options{Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	high := db.Now() // a reading past the saved one
	require.NoError(t, db.Close())
	require.Equal(t, uint64(1), db.Stats().Commits, "Close saved the clock")
	clock.Advance(-24 * time.Hour)
	db, err = oncekv.Open(path, &oncekv.Options{Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	require.False(t, db.Now().Before(high))
	require.NoError(t, db.Close())
}

// TestCloseKeepsWhatAReadSaw: a lease seen run out by any reading of
// the store's clock (here DB.Now, which writes nothing) stays run out
// after Close and a reopen on a clock stepped back to inside the lease,
// though Close itself takes no new reading.
func TestCloseKeepsWhatAReadSaw(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	clock := oncetest.NewClock(claimEpoch)
	opts := &oncekv.Options{NoSync: true, Now: clock.Now, KeepOrphanedClaims: true, ExpireInterval: -1}
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	c := mustClaim(t, db, welcome)
	clock.Advance(lease + 10*time.Second)
	require.False(t, db.Now().Before(c.LeaseUntil()), "the store saw the lease run out")
	require.NoError(t, db.Close())

	clock.Set(claimEpoch.Add(lease / 2)) // stepped back to inside the lease
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	defer db.Close()
	taken, err := db.Claim(ctx, welcome, lease)
	require.NoError(t, err, "the lease the store saw run out stays run out")
	require.Greater(t, taken.Token(), c.Token())
}
