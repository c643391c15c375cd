package oncekv_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
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

// requireDuplicate asks twice (see askTwice) and requires a duplicate
// with the response want.
func requireDuplicate(t *testing.T, db *oncekv.DB, req oncekv.Request, want string) oncekv.Result {
	t.Helper()
	res, err := askTwice(t, db, req)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, want, string(res.Response))
	return res
}

// openAnswered opens a store on a test clock, applies req with the response
// "one", and asks for its duplicate, so that the mark is cached.
func openAnswered(t *testing.T, req oncekv.Request) (*oncekv.DB, *oncetest.Clock, *int) {
	t.Helper()
	clock := oncetest.NewClock(epoch)
	db := oncetest.Open(t, windowOpts(clock))
	ran := new(int)
	_, err := db.Apply(context.Background(), req, respond(ran, "one"))
	require.NoError(t, err)
	requireDuplicate(t, db, req, "one")
	return db, clock, ran
}

// respond is an effect returning resp, counting its runs in ran.
func respond(ran *int, resp string) func(*oncekv.Tx) ([]byte, error) {
	return func(*oncekv.Tx) ([]byte, error) {
		*ran++
		return []byte(resp), nil
	}
}

func TestDuplicateAnswersFollowForget(t *testing.T) {
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("first")}
	db, _, ran := openAnswered(t, req)
	res := requireDuplicate(t, db, req, "one")
	res.Response[0] = 'X' // the caller's copy, not the store's
	requireDuplicate(t, db, req, "one")
	_, err := askTwice(t, db, oncekv.Request{Handler: "h", Key: "k", Payload: []byte("other")})
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)

	// Forgotten: the key is new again, for any payload.
	require.NoError(t, db.Forget("h", "k"))
	other := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("second")}
	res, err = db.Apply(ctx, other, respond(ran, "two"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, 2, *ran)
	requireDuplicate(t, db, other, "two")
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
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}
	db, clock, ran := openAnswered(t, req)

	// Past the retention, but not expired yet: still a duplicate.
	clock.Advance(26 * time.Hour)
	requireDuplicate(t, db, req, "one")
	st, err := db.Expire(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, int(st.Windows))
	res, err := db.Apply(ctx, req, respond(ran, "again"))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "a retry after its window expired is applied again")
	require.Equal(t, 2, *ran)
	requireDuplicate(t, db, req, "again")
}

func TestDuplicateAnswersFollowLoadMarks(t *testing.T) {
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}
	db, clock, _ := openAnswered(t, req)

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
	requireDuplicate(t, db, moved, "there")
}

func TestDuplicateAnswersFollowClaims(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	db := oncetest.Open(t, windowOpts(clock))
	ctx := context.Background()

	// claimed claims key, and checks that its duplicates are in progress.
	claimed := func(key string) (oncekv.Request, *oncekv.Claim) {
		req := oncekv.Request{Handler: "h", Key: key, Payload: []byte("p")}
		c, err := db.Claim(ctx, req, time.Minute)
		require.NoError(t, err)
		_, err = askTwice(t, db, req)
		require.ErrorIs(t, err, oncekv.ErrInProgress)
		return req, c
	}

	// Claimed, then completed.
	done, c := claimed("done")
	_, err := c.Complete(ctx, []byte("sent"), nil)
	require.NoError(t, err)
	requireDuplicate(t, db, done, "sent")
	require.ErrorIs(t, db.ReleaseClaim("h", "done", c.Token()), oncekv.ErrClaimDone)
	requireDuplicate(t, db, done, "sent")

	// Claimed, released by an operator, taken over by an Apply.
	released, c := claimed("released")
	require.NoError(t, db.ReleaseClaim("h", "released", c.Token()))
	ran := 0
	res, err := db.Apply(ctx, released, respond(&ran, "taken"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, 1, ran)
	requireDuplicate(t, db, released, "taken")

	// Claimed, failed for good.
	failed, c := claimed("failed")
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
	requireDuplicate(t, db, req, "late")
	info, err := db.Mark("h", "slow")
	require.NoError(t, err)
	require.True(t, info.Window.After(epoch), "the mark moved to a newer window")

	// Past the lease the first window kept itself for: it expires.
	clock.Advance(19 * time.Hour)
	st, err := db.Expire(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, int(st.Windows))
	res := requireDuplicate(t, db, req, "late")
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

// TestDuplicateNilAndEmptyResponsesStayDistinct: Result.Response promises nil
// and empty stay distinct, on every path a duplicate can be answered by:
// the cache filled by the commit, a read transaction after reopen, and the
// cache filled by that read.
func TestDuplicateNilAndEmptyResponsesStayDistinct(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	opts := &oncekv.Options{NoSync: true, ExpireInterval: -1}
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	cases := map[string][]byte{"nil": nil, "empty": {}}
	check := func(when string) {
		for key, want := range cases {
			res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, mustNotApply(t))
			require.NoError(t, err)
			require.True(t, res.Duplicate)
			require.Equal(t, want == nil, res.Response == nil, "%s response %s: %#v", key, when, res.Response)
			require.Empty(t, res.Response)
		}
	}
	for key, resp := range cases {
		res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, func(*oncekv.Tx) ([]byte, error) { return resp, nil })
		require.NoError(t, err)
		require.Equal(t, resp == nil, res.Response == nil, key)
	}
	check("cached by the commit")
	require.NoError(t, db.Close())
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	defer db.Close()
	check("read after reopen")
	check("cached by the read")
}

// TestDuplicateAnswersNeverStaleWhateverWrote: as
// TestDuplicateAnswersNeverStaleUnderConcurrency, with the key written
// afresh each round by another of the ways a final mark is written (Apply,
// Tx.Mark, a claim completed, a released claim taken over by Apply,
// LoadMarks, a permanent failure), while readers send duplicates. A
// duplicate must never carry a round older than the last one written before
// it was sent, nor one forgotten before it was sent.
func TestDuplicateAnswersNeverStaleWhateverWrote(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}
	var rounds roundsSeen
	rounds.written.Store(-1)
	rounds.forgotten.Store(-1)
	readers, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var dups atomic.Int64
	for range 3 {
		wg.Go(func() { dups.Add(rounds.read(readers, t, db, req)) })
	}
	// Before the store closes, even when the writer fails the test.
	t.Cleanup(func() { stop(); wg.Wait() })
	for i := range int64(240) {
		resp := []byte(strconv.FormatInt(i, 10))
		switch i % 6 {
		case 0:
			_, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return resp, nil })
			require.NoError(t, err)
		case 1:
			require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
				_, err := tx.Mark(req, resp)
				return err
			}))
		case 2:
			c, err := db.Claim(ctx, req, time.Hour)
			require.NoError(t, err)
			_, err = c.Complete(ctx, resp, nil)
			require.NoError(t, err)
		case 3:
			c, err := db.Claim(ctx, req, time.Hour)
			require.NoError(t, err)
			require.NoError(t, db.ReleaseClaim("h", "k", c.Token()))
			_, err = db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return resp, nil })
			require.NoError(t, err)
		case 4:
			n, err := db.LoadMarks([]oncekv.MarkInfo{{Handler: "h", Key: "k", State: oncekv.MarkDone,
				FirstSeen: db.Now(), Fingerprint: sha256.Sum256(req.Payload), Response: resp}})
			require.NoError(t, err)
			require.Equal(t, 1, n)
		case 5:
			_, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(errors.New(string(resp))) })
			var fe *oncekv.FailedError
			require.ErrorAs(t, err, &fe)
		}
		rounds.written.Store(i)
		for range 3 { // let the readers fill the cache
			_, _ = db.Apply(ctx, req, nil)
		}
		require.NoError(t, db.Forget("h", "k"))
		rounds.forgotten.Store(i)
	}
	stop()
	wg.Wait()
	require.Positive(t, dups.Load())
}

// roundsSeen is the last round of a key written and forgotten, as the
// writer of TestDuplicateAnswersNeverStaleWhateverWrote publishes them.
type roundsSeen struct{ written, forgotten atomic.Int64 }

// read sends duplicates of req until ctx ends, checks that each answer is
// no older than the rounds published before it was sent, and returns how
// many duplicates it checked.
func (r *roundsSeen) read(ctx context.Context, t *testing.T, db *oncekv.DB, req oncekv.Request) int64 {
	errUnmarked := errors.New("a reader's effect: the key has no final mark")
	var n int64
	for ctx.Err() == nil {
		forgotten, written := r.forgotten.Load(), r.written.Load()
		res, err := db.Apply(context.Background(), req, func(*oncekv.Tx) ([]byte, error) { return nil, errUnmarked })
		if errors.Is(err, errUnmarked) || errors.Is(err, oncekv.ErrInProgress) {
			continue
		}
		answer := string(res.Response)
		if fe := (*oncekv.FailedError)(nil); errors.As(err, &fe) {
			answer = fe.Message
		} else if !assertNoError(t, err) {
			return n
		}
		if round, perr := strconv.ParseInt(answer, 10, 64); perr != nil || round < written || round <= forgotten {
			t.Errorf("stale duplicate: round %q, sent after round %d was written and %d forgotten", answer, written, forgotten)
			return n
		}
		n++
	}
	return n
}
