package oncekv_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// Adversarial review of issue 11's cache of final marks and write path:
// each test here failed on the code it was written against.

// TestReviewTxMarkTakeoverKeepsRetention: Tx.Mark that takes over an
// expired claim writes a DONE mark now, so the key must stay deduplicated
// for Retention from now, as Apply's takeover and a late Complete do. The
// mark must not stay in the claim's old window, which expires sooner.
func TestReviewTxMarkTakeoverKeepsRetention(t *testing.T) {
	ctx := context.Background()
	clock := oncetest.NewClock(epoch)
	db := oncetest.Open(t, windowOpts(clock)) // 1h windows, 24h retention
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}
	c, err := db.Claim(ctx, req, time.Minute)
	require.NoError(t, err)

	// The claim's lease ran out long ago; a transaction marks the key.
	clock.Advance(10 * time.Hour)
	marked := clock.Now()
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		res, err := tx.Mark(req, []byte("marked"))
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		return nil
	}))

	// The old holder is fenced off with both tokens, as after Apply's
	// takeover.
	_, err = c.Complete(ctx, []byte("late"), nil)
	var fe *oncekv.FenceError
	require.ErrorAs(t, err, &fe)
	require.Greater(t, fe.Stored, c.Token())

	// Past the claim's first window's expiry, well within Retention of the
	// mark: still a duplicate.
	clock.Set(epoch.Add(26 * time.Hour))
	require.Less(t, clock.Now().Sub(marked), 24*time.Hour)
	_, err = db.Expire(ctx)
	require.NoError(t, err)
	res, err := db.Apply(ctx, req, mustNotApply(t))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "marked", string(res.Response))
}

// TestReviewNilAndEmptyResponsesStayDistinct: Result.Response promises nil
// and empty stay distinct, on every path a duplicate can be answered by:
// the cache filled by the commit, a read transaction after reopen, and the
// cache filled by that read.
func TestReviewNilAndEmptyResponsesStayDistinct(t *testing.T) {
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

// TestReviewTxMarkOwnKeyInCompleteEffect: Complete's effect runs in the
// transaction that writes the claim's DONE mark, as Apply's effect does, so
// Tx.Mark of the claim's own key there is ErrMarkOwnKey and writes
// nothing, whether the lease is live or has run out (the holder may still
// complete then): the mark is Complete's to write.
func TestReviewTxMarkOwnKeyInCompleteEffect(t *testing.T) {
	for _, expired := range []bool{false, true} {
		t.Run(fmt.Sprint("lease expired ", expired), func(t *testing.T) {
			ctx := context.Background()
			db, clock := openClocked(t)
			req := oncekv.Request{Handler: "h", Key: "own", Payload: []byte("p")}
			c := mustClaim(t, db, req)
			if expired {
				clock.Advance(2 * lease)
			}
			res, err := c.Complete(ctx, []byte("completed"), func(tx *oncekv.Tx) error {
				_, err := tx.Mark(req, []byte("marked"))
				require.ErrorIs(t, err, oncekv.ErrMarkOwnKey)
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, "completed", string(res.Response))
			res, err = db.Apply(ctx, req, mustNotApply(t))
			require.NoError(t, err)
			require.Equal(t, "completed", string(res.Response))
		})
	}
}

// TestReviewApplyInsideAnEffectWaitsForItsContext: an effect that calls
// Apply on its own DB for a new key asks for the write lock its own
// commit holds. The inner call must give up when its context ends (every
// wait honours its context), and the outer call must still commit.
func TestReviewApplyInsideAnEffectWaitsForItsContext(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	var inner error
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "outer"}, func(*oncekv.Tx) ([]byte, error) {
		ictx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, inner = db.Apply(ictx, oncekv.Request{Handler: "h", Key: "inner"}, func(*oncekv.Tx) ([]byte, error) {
			return []byte("inner"), nil
		})
		return []byte("outer"), nil
	})
	require.NoError(t, err)
	require.Equal(t, "outer", string(res.Response))
	require.ErrorIs(t, inner, context.DeadlineExceeded)
	// The inner key was not applied: a later Apply runs its effect.
	ran := 0
	res, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "inner"}, respond(&ran, "later"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, 1, ran)
}

// TestReviewDuplicatesNeverStaleWhateverWrote: as
// TestDuplicateAnswersNeverStaleUnderConcurrency, with the key written
// afresh each round by another of the ways a final mark is written (Apply,
// Tx.Mark, a claim completed, a released claim taken over by Apply,
// LoadMarks, a permanent failure), while readers send duplicates. A
// duplicate must never carry a round older than the last one written before
// it was sent, nor one forgotten before it was sent.
func TestReviewDuplicatesNeverStaleWhateverWrote(t *testing.T) {
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
// writer of TestReviewDuplicatesNeverStaleWhateverWrote publishes them.
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

// TestReviewTxMarkRefusesAResponseApplyWouldRefuse: Tx.Mark records a key
// "exactly as Apply would", so a response larger than a mark can hold is
// ErrResponseTooLarge there too, and writes nothing.
func TestReviewTxMarkRefusesAResponseApplyWouldRefuse(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	oncekv.SetMaxResponseSize(db, 8)
	req := oncekv.Request{Handler: "h", Key: "big"}
	big := []byte("more than eight bytes")
	_, err := db.Apply(context.Background(), req, func(*oncekv.Tx) ([]byte, error) { return big, nil })
	require.ErrorIs(t, err, oncekv.ErrResponseTooLarge)
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		_, err := tx.Mark(req, big)
		require.ErrorIs(t, err, oncekv.ErrResponseTooLarge)
		return nil // the caller commits what else it did
	}))
	_, err = db.Mark("h", "big")
	require.ErrorIs(t, err, oncekv.ErrNotFound, "nothing was written")
}

// TestReviewCompleteEffectPanicOrGoexitCountsAsEffectError: Stats.EffectErrors
// counts Claim.Complete's effect errors, as Apply's; an effect that panics
// or calls runtime.Goexit is one (Apply counts it so), and the claim still
// holds the key.
func TestReviewCompleteEffectPanicOrGoexitCountsAsEffectError(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			db, _ := openClocked(t)
			c := mustClaim(t, db, welcome)
			before := db.Stats()
			returned, p := mustWithin(t, "Complete", func() {
				_, _ = c.Complete(context.Background(), []byte("r"), func(*oncekv.Tx) error {
					if how == "panic" {
						panic("boom")
					}
					runtime.Goexit()
					return nil
				})
			})
			require.False(t, returned)
			require.Equal(t, how == "panic", p != nil, p)
			d := db.Stats().Total.Sub(before.Total)
			require.Equal(t, uint64(1), d.EffectErrors, "%+v", d)
			require.False(t, c.Done())
			_, err := c.Complete(context.Background(), []byte("r"), nil)
			require.NoError(t, err, "the claim still holds the key")
		})
	}
}

// TestReviewCloseKeepsWhatAReadSaw: a lease seen run out by any reading of
// the store's clock (here DB.Now, which writes nothing) stays run out
// after Close and a reopen on a clock stepped back to inside the lease,
// though Close itself takes no new reading.
func TestReviewCloseKeepsWhatAReadSaw(t *testing.T) {
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
