package oncekv_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// A duplicate of a final mark is answered from memory once an earlier
// duplicate has read the mark. These tests change or remove such a mark in
// every way the API allows, after duplicates have asked for it, and check
// that the next duplicate gets what the file says, never the old answer.

// askTwice sends req twice with an effect that must not run, and returns
// the second answer after checking that both were the same: the first
// reads the mark, the second may be answered from what the first read.
func askTwice(t *testing.T, db *oncekv.DB, req oncekv.Request) (oncekv.Result, error) {
	t.Helper()
	res1, err1 := db.Apply(context.Background(), req, mustNotRunApply(t))
	res2, err2 := db.Apply(context.Background(), req, mustNotRunApply(t))
	require.Equal(t, res1, res2)
	require.Equal(t, fmt.Sprint(err1), fmt.Sprint(err2))
	return res2, err2
}

// respond is an effect returning resp, counting its runs in ran.
func respond(ran *int, resp string) func(*oncekv.Tx) ([]byte, error) {
	return func(*oncekv.Tx) ([]byte, error) {
		*ran++
		return []byte(resp), nil
	}
}

func TestDuplicateAnswersFollowForget(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	db := oncetest.Open(t, windowOpts(clock))
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("first")}
	ran := 0
	_, err := db.Apply(ctx, req, respond(&ran, "one"))
	require.NoError(t, err)
	res, err := askTwice(t, db, req)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "one", string(res.Response))
	res.Response[0] = 'X' // the caller's copy, not the store's
	res, err = askTwice(t, db, req)
	require.NoError(t, err)
	require.Equal(t, "one", string(res.Response))
	_, err = askTwice(t, db, oncekv.Request{Handler: "h", Key: "k", Payload: []byte("other")})
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)

	// Forgotten: the key is new again, for any payload.
	require.NoError(t, db.Forget("h", "k"))
	other := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("second")}
	res, err = db.Apply(ctx, other, respond(&ran, "two"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, 2, ran)
	res, err = askTwice(t, db, other)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "two", string(res.Response))
	_, err = askTwice(t, db, req)
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)

	// Forgotten again, then a permanent failure: duplicates get its error.
	require.NoError(t, db.Forget("h", "k"))
	_, err = db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(errors.New("declined")) })
	require.ErrorIs(t, err, oncekv.ErrFailed)
	_, err = askTwice(t, db, req)
	var failed *oncekv.FailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, "declined", failed.Message)
}

func TestDuplicateAnswersFollowExpiry(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	db := oncetest.Open(t, windowOpts(clock))
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}
	ran := 0
	_, err := db.Apply(ctx, req, respond(&ran, "one"))
	require.NoError(t, err)
	res, err := askTwice(t, db, req)
	require.NoError(t, err)
	require.True(t, res.Duplicate)

	// Past the retention, but not expired yet: still a duplicate.
	clock.Advance(26 * time.Hour)
	res, err = askTwice(t, db, req)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	st, err := db.Expire(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, int(st.Windows))
	res, err = db.Apply(ctx, req, respond(&ran, "again"))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "a retry after its window expired is applied again")
	require.Equal(t, 2, ran)
	res, err = askTwice(t, db, req)
	require.NoError(t, err)
	require.Equal(t, "again", string(res.Response))
}

func TestDuplicateAnswersFollowLoadMarks(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	db := oncetest.Open(t, windowOpts(clock))
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}
	_, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return []byte("here"), nil })
	require.NoError(t, err)
	_, err = askTwice(t, db, req)
	require.NoError(t, err)

	// The key is forgotten and loaded from another store, with another
	// payload and response.
	require.NoError(t, db.Forget("h", "k"))
	moved := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("q")}
	n, err := db.LoadMarks([]oncekv.MarkInfo{{
		Handler: "h", Key: "k", State: oncekv.MarkDone, FirstSeen: clock.Now(),
		Fingerprint: sha256.Sum256(moved.Payload), Response: []byte("there"),
	}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = askTwice(t, db, req)
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	res, err := askTwice(t, db, moved)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "there", string(res.Response))
}

func TestDuplicateAnswersFollowClaims(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	db := oncetest.Open(t, windowOpts(clock))
	ctx := context.Background()

	// Claimed: in progress, then completed.
	done := oncekv.Request{Handler: "h", Key: "done", Payload: []byte("p")}
	c, err := db.Claim(ctx, done, time.Minute)
	require.NoError(t, err)
	_, err = askTwice(t, db, done)
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	_, err = c.Complete(ctx, []byte("sent"), nil)
	require.NoError(t, err)
	res, err := askTwice(t, db, done)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "sent", string(res.Response))
	require.ErrorIs(t, db.ReleaseClaim("h", "done", c.Token()), oncekv.ErrClaimDone)
	res, err = askTwice(t, db, done)
	require.NoError(t, err)
	require.Equal(t, "sent", string(res.Response))

	// Claimed, released by an operator, taken over by an Apply.
	released := oncekv.Request{Handler: "h", Key: "released", Payload: []byte("p")}
	c, err = db.Claim(ctx, released, time.Minute)
	require.NoError(t, err)
	_, err = askTwice(t, db, released)
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	require.NoError(t, db.ReleaseClaim("h", "released", c.Token()))
	ran := 0
	res, err = db.Apply(ctx, released, respond(&ran, "taken"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, 1, ran)
	res, err = askTwice(t, db, released)
	require.NoError(t, err)
	require.Equal(t, "taken", string(res.Response))

	// Claimed, failed for good.
	failed := oncekv.Request{Handler: "h", Key: "failed", Payload: []byte("p")}
	c, err = db.Claim(ctx, failed, time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Fail(ctx, oncekv.Permanent(errors.New("bounced"))))
	_, err = askTwice(t, db, failed)
	var fe *oncekv.FailedError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "bounced", fe.Message)
}

// TestDuplicateAnswersFollowAMovedMark: a claim held past its window's
// retention completes into the newest window; once its first window has
// expired, the duplicate is still answered, from where the mark went.
func TestDuplicateAnswersFollowAMovedMark(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	db := oncetest.Open(t, windowOpts(clock))
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "slow", Payload: []byte("p")}
	c, err := db.Claim(ctx, req, 48*time.Hour)
	require.NoError(t, err)
	clock.Advance(30 * time.Hour)
	_, err = c.Complete(ctx, []byte("late"), nil)
	require.NoError(t, err)
	res, err := askTwice(t, db, req)
	require.NoError(t, err)
	require.Equal(t, "late", string(res.Response))
	info, err := db.Mark("h", "slow")
	require.NoError(t, err)
	require.True(t, info.Window.After(epoch), "the mark moved to a newer window")

	// Past the lease the first window kept itself for: it expires.
	clock.Advance(19 * time.Hour)
	st, err := db.Expire(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, int(st.Windows))
	res, err = askTwice(t, db, req)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "late", string(res.Response))
	require.True(t, res.FirstSeen.Equal(epoch), res.FirstSeen)
}

// TestDuplicateAnswersNeverStaleUnderConcurrency: readers send duplicates of
// one key while a writer forgets it and applies it again with a new
// response, round after round. A duplicate must never carry a response
// older than the last one applied before it was sent, nor one forgotten
// before it was sent.
func TestDuplicateAnswersNeverStaleUnderConcurrency(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}
	var applied, forgotten atomic.Int64 // the last round applied, forgotten; -1: none
	applied.Store(-1)
	forgotten.Store(-1)
	errReader := errors.New("a reader's effect: the key was forgotten")
	const rounds = 300
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var dups atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				f, a := forgotten.Load(), applied.Load()
				res, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return nil, errReader })
				if errors.Is(err, errReader) {
					continue
				}
				if !assertNoError(t, err) || !res.Duplicate {
					t.Error("neither a duplicate nor the reader's effect:", res, err)
					return
				}
				round, perr := strconv.ParseInt(string(res.Response), 10, 64)
				if perr != nil || round < a || round <= f {
					t.Errorf("stale duplicate: round %q, sent after round %d was applied and %d forgotten", res.Response, a, f)
					return
				}
				dups.Add(1)
			}
		})
	}
	for i := range int64(rounds) {
		res, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return []byte(strconv.FormatInt(i, 10)), nil })
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		applied.Store(i)
		for range 3 { // let the readers fill the cache
			_, err := db.Apply(ctx, req, nil)
			require.NoError(t, err)
		}
		require.NoError(t, db.Forget("h", "k"))
		forgotten.Store(i)
	}
	close(stop)
	wg.Wait()
	require.Positive(t, dups.Load())
}

// assertNoError reports err as a test error, from any goroutine.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
