package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// The claim tests send e-mails: an effect that cannot join the store's
// transaction.
var (
	welcome    = oncekv.Request{Handler: "email", Key: "welcome-42", Payload: []byte("to=ann@example.com")}
	claimEpoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).Local() // the store reports times in Local
	lease      = 30 * time.Second
)

// openClocked opens a store whose clock the test moves by hand.
func openClocked(t *testing.T) (*oncekv.DB, *oncetest.Clock) {
	t.Helper()
	clock := oncetest.NewClock(claimEpoch)
	return oncetest.Open(t, &oncekv.Options{NoSync: true, Now: clock.Now}), clock
}

func mustClaim(t *testing.T, db *oncekv.DB, req oncekv.Request) *oncekv.Claim {
	t.Helper()
	c, err := db.Claim(context.Background(), req, lease)
	require.NoError(t, err)
	require.False(t, c.Done())
	require.Positive(t, c.Token())
	return c
}

// mustNotRun is an effect for a call that must not get as far as running it.
func mustNotRun(t *testing.T) func(*oncekv.Tx) error {
	return func(*oncekv.Tx) error {
		t.Error("the effect ran")
		return nil
	}
}

// mustNotApply is mustNotRun for Apply.
func mustNotApply(t *testing.T) func(*oncekv.Tx) ([]byte, error) {
	return func(tx *oncekv.Tx) ([]byte, error) { return nil, mustNotRun(t)(tx) }
}

func TestClaimCompleteThenDuplicates(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	c := mustClaim(t, db, welcome)
	require.Equal(t, claimEpoch.Add(lease), c.LeaseUntil())
	require.Zero(t, c.Result())

	clock.Advance(time.Second)
	res, err := c.Complete(ctx, []byte("sent: msg-id 7"), func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("outbox"))
		if err != nil {
			return err
		}
		return b.Put([]byte(welcome.Key), []byte("sent")) // the local half, in the same transaction
	})
	require.NoError(t, err)
	require.Equal(t, oncekv.Result{Response: []byte("sent: msg-id 7"), FirstSeen: claimEpoch}, res)
	require.True(t, c.Done())
	require.Equal(t, res, c.Result())
	require.True(t, c.LeaseUntil().IsZero())

	// A redelivery: Claim answers from the mark and the e-mail is not sent again.
	dup, err := db.Claim(ctx, welcome, lease)
	require.NoError(t, err)
	require.True(t, dup.Done())
	require.Equal(t, oncekv.Result{Response: []byte("sent: msg-id 7"), Duplicate: true, FirstSeen: claimEpoch}, dup.Result())
	_, err = dup.Complete(ctx, []byte("again"), mustNotRun(t))
	require.ErrorIs(t, err, oncekv.ErrClaimDone)
	require.ErrorIs(t, dup.Extend(ctx, lease), oncekv.ErrClaimDone)
	require.ErrorIs(t, dup.Fail(ctx, errors.New("x")), oncekv.ErrClaimDone)
	_, err = c.Complete(ctx, []byte("twice"), mustNotRun(t))
	require.ErrorIs(t, err, oncekv.ErrClaimDone)

	// Apply sees the same mark.
	ares, err := db.Apply(ctx, welcome, mustNotApply(t))
	require.NoError(t, err)
	require.True(t, ares.Duplicate)
	require.Equal(t, "sent: msg-id 7", string(ares.Response))
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.Equal(t, "sent", string(tx.Bucket([]byte("outbox")).Get([]byte(welcome.Key))))
		return nil
	}))

	st := db.Stats().Handlers["email"]
	require.Equal(t, uint64(1), st.Applied)
	require.Equal(t, uint64(2), st.DuplicatesSuppressed)
}

// TestClaimTakeoverFencesTheZombie is the article's second story: a worker
// claims, stalls in a GC pause past its lease, another worker takes the key
// over, and the first one's late Extend, Complete and Fail are refused.
func TestClaimTakeoverFencesTheZombie(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	zombie := mustClaim(t, db, welcome)

	// While the lease is live, nobody else gets the key, and nobody waits.
	clock.Advance(lease - time.Nanosecond)
	_, err := db.Claim(ctx, welcome, lease)
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	_, err = db.Apply(ctx, welcome, mustNotApply(t))
	require.ErrorIs(t, err, oncekv.ErrInProgress)

	// The lease runs out: the next claim takes over with a greater token.
	clock.Advance(time.Nanosecond)
	heir := mustClaim(t, db, welcome)
	require.Greater(t, heir.Token(), zombie.Token())

	// The zombie wakes up. Each of its calls is refused and changes nothing.
	before := db.Stats()
	err = zombie.Extend(ctx, time.Hour)
	require.ErrorIs(t, err, oncekv.ErrFenced)
	var fe *oncekv.FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, oncekv.FenceError{Stored: heir.Token(), Presented: zombie.Token()}, *fe)
	var re *oncekv.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, oncekv.RequestError{Op: "claim", Handler: "email", Key: "welcome-42", Err: re.Err}, *re)
	_, err = zombie.Complete(ctx, []byte("sent by the zombie"), mustNotRun(t))
	require.ErrorIs(t, err, oncekv.ErrFenced)
	require.ErrorIs(t, zombie.Fail(ctx, oncekv.Permanent(errors.New("zombie's failure"))), oncekv.ErrFenced)
	require.ErrorIs(t, zombie.Fail(ctx, errors.New("zombie's release")), oncekv.ErrFenced)
	require.False(t, zombie.Done())
	require.True(t, zombie.LeaseUntil().IsZero())
	require.Equal(t, uint64(4), db.Stats().Sub(before).Handlers["email"].Fenced)

	// The heir still holds the key, with the lease it was given.
	clock.Advance(lease - time.Nanosecond)
	_, err = db.Claim(ctx, welcome, lease)
	require.ErrorIs(t, err, oncekv.ErrInProgress, "the zombie's Extend must not have touched the lease")
	res, err := heir.Complete(ctx, []byte("sent by the heir"), nil)
	require.NoError(t, err)
	require.Equal(t, "sent by the heir", string(res.Response))
	dup, err := db.Claim(ctx, welcome, lease)
	require.NoError(t, err)
	require.Equal(t, "sent by the heir", string(dup.Result().Response))
}

func TestClaimExtendKeepsTheKey(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	c := mustClaim(t, db, welcome)
	clock.Advance(20 * time.Second)
	require.NoError(t, c.Extend(ctx, lease))
	require.Equal(t, claimEpoch.Add(20*time.Second+lease), c.LeaseUntil())

	clock.Advance(20 * time.Second) // past the first lease, within the extended one
	_, err := db.Claim(ctx, welcome, lease)
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	clock.Advance(10 * time.Second)
	heir := mustClaim(t, db, welcome)
	require.Greater(t, heir.Token(), c.Token())
	require.ErrorIs(t, c.Extend(ctx, lease), oncekv.ErrFenced)
}

// TestClaimLateCompleteWithoutTakeover: past its lease, a holder still
// completes while nobody has taken the key over. The token decides, not
// the clock.
func TestClaimLateCompleteWithoutTakeover(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	c := mustClaim(t, db, welcome)
	clock.Advance(time.Hour)
	require.NoError(t, c.Extend(ctx, lease), "nobody took over: the holder may renew")
	clock.Advance(time.Hour)
	res, err := c.Complete(ctx, []byte("late but alone"), nil)
	require.NoError(t, err)
	require.Equal(t, "late but alone", string(res.Response))
}

// TestApplyTakesOverAnExpiredClaim: lease expiry alone frees the key of a
// crashed worker, for Apply as for Claim; the worker, if it comes back, is
// fenced off.
func TestApplyTakesOverAnExpiredClaim(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	crashed := mustClaim(t, db, welcome)
	clock.Advance(lease)
	res, err := db.Apply(ctx, welcome, func(*oncekv.Tx) ([]byte, error) { return []byte("by Apply"), nil })
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, claimEpoch, res.FirstSeen, "a takeover keeps the key's first sighting")

	_, err = crashed.Complete(ctx, []byte("by the crashed worker"), mustNotRun(t))
	require.ErrorIs(t, err, oncekv.ErrFenced)
	var fe *oncekv.FenceError
	require.ErrorAs(t, err, &fe, "a takeover by Apply fences like one by Claim")
	require.Equal(t, crashed.Token(), fe.Presented)
	require.Greater(t, fe.Stored, fe.Presented)
	dup, err := db.Apply(ctx, welcome, nil)
	require.NoError(t, err)
	require.Equal(t, "by Apply", string(dup.Response))
}

func TestClaimFailTransientReleasesAtOnce(t *testing.T) {
	db, _ := openClocked(t) // the clock never moves: no waiting for the lease
	ctx := context.Background()
	first := mustClaim(t, db, welcome)
	require.NoError(t, first.Fail(ctx, errors.New("smtp: 451 try again later")))
	require.False(t, first.Done())
	require.True(t, first.LeaseUntil().IsZero())
	require.ErrorIs(t, first.Fail(ctx, nil), oncekv.ErrClaimDone)

	retry := mustClaim(t, db, welcome)
	require.Greater(t, retry.Token(), first.Token())
	require.NoError(t, retry.Fail(ctx, nil), "a nil error releases too")

	// The key stays bound to its payload.
	other := welcome
	other.Payload = []byte("to=bob@example.com")
	_, err := db.Claim(ctx, other, lease)
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)

	// Apply may take a released key over at once as well.
	res, err := db.Apply(ctx, welcome, func(*oncekv.Tx) ([]byte, error) { return []byte("sent"), nil })
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, uint64(2), db.Stats().Handlers["email"].EffectErrors)
}

func TestClaimFailPermanentIsRecordedAndReplayed(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	c := mustClaim(t, db, welcome)
	errBounce := errors.New("smtp: 550 no such user")
	require.NoError(t, c.Fail(ctx, oncekv.Permanent(errBounce)))
	require.ErrorIs(t, c.Fail(ctx, oncekv.Permanent(errBounce)), oncekv.ErrClaimDone)
	_, err := c.Complete(ctx, nil, mustNotRun(t))
	require.ErrorIs(t, err, oncekv.ErrClaimDone)

	clock.Advance(24 * time.Hour) // a FAILED mark has no lease to run out
	again, err := db.Claim(ctx, welcome, lease)
	require.Nil(t, again)
	require.ErrorIs(t, err, oncekv.ErrFailed)
	var failed *oncekv.FailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, "smtp: 550 no such user", failed.Message)
	require.Contains(t, err.Error(), `"welcome-42"`)

	res, err := db.Apply(ctx, welcome, mustNotApply(t))
	require.ErrorIs(t, err, oncekv.ErrFailed)
	require.True(t, res.Duplicate)
	st := db.Stats().Handlers["email"]
	require.Equal(t, uint64(1), st.FailedRecorded)
	require.Equal(t, uint64(2), st.FailedReplayed)
}

// TestClaimCompleteEffectErrors: Complete's effect commits with the DONE
// mark or not at all.
func TestClaimCompleteEffectErrors(t *testing.T) {
	db, _ := openClocked(t)
	ctx := context.Background()
	write := func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("outbox"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	}
	outbox := func() (n int) {
		require.NoError(t, db.View(func(tx *oncekv.Tx) error {
			if b := tx.Bucket([]byte("outbox")); b != nil {
				n = len(b.Get([]byte("k")))
			}
			return nil
		}))
		return n
	}

	c := mustClaim(t, db, welcome)
	errDisk := errors.New("ledger full")
	_, err := c.Complete(ctx, []byte("r"), func(tx *oncekv.Tx) error {
		if err := write(tx); err != nil {
			return err
		}
		return errDisk
	})
	require.ErrorIs(t, err, errDisk)
	require.Zero(t, outbox(), "the effect's writes are rolled back")
	require.False(t, c.Done(), "the claim still holds the key")

	cancelled, cancel := context.WithCancel(ctx)
	_, err = c.Complete(cancelled, []byte("r"), func(tx *oncekv.Tx) error {
		cancel()
		return write(tx)
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, outbox(), "a context done before the commit applies nothing")

	// A fenced write in the effect is the effect's business: refused here,
	// it fails the effect, not the claim.
	require.NoError(t, putFenced(db, "x", []byte("new"), 9))
	_, err = c.Complete(ctx, []byte("r"), func(tx *oncekv.Tx) error {
		return tx.Bucket(registers).PutFenced([]byte("x"), []byte("old"), 8)
	})
	require.ErrorIs(t, err, oncekv.ErrFenced)
	require.False(t, c.Done(), "a refused write in the effect does not end the claim")
	require.Equal(t, uint64(1), db.Stats().FencedWrites)

	res, err := c.Complete(ctx, []byte("r"), write)
	require.NoError(t, err)
	require.Equal(t, "r", string(res.Response))
	require.Equal(t, 1, outbox())

	// A permanent effect error records the key FAILED, as Apply would.
	bounce := oncekv.Request{Handler: "email", Key: "bounce-1"}
	b := mustClaim(t, db, bounce)
	errBounce := errors.New("550 no such user")
	_, err = b.Complete(ctx, []byte("r"), func(*oncekv.Tx) error { return oncekv.Permanent(errBounce) })
	require.ErrorIs(t, err, oncekv.ErrFailed)
	require.ErrorIs(t, err, errBounce, "the failing call sees its own error")
	_, err = db.Claim(ctx, bounce, lease)
	require.ErrorIs(t, err, oncekv.ErrFailed)

	st := db.Stats().Handlers["email"]
	require.Equal(t, uint64(2), st.EffectErrors, "errDisk and the fenced write")
	require.Equal(t, uint64(1), st.Aborted, "the cancelled context")
	require.Equal(t, uint64(1), st.FailedRecorded)
}

// TestClaimConcurrentOneWinner: of many workers claiming one key at once,
// exactly one gets it and the others are told at once.
func TestClaimConcurrentOneWinner(t *testing.T) {
	db, _ := openClocked(t)
	const workers = 16
	claims := make([]*oncekv.Claim, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { claims[i], errs[i] = db.Claim(context.Background(), welcome, lease) })
	}
	wg.Wait()
	won := 0
	for i := range workers {
		if errs[i] == nil {
			won++
			continue
		}
		require.ErrorIs(t, errs[i], oncekv.ErrInProgress)
	}
	require.Equal(t, 1, won)
	require.Equal(t, uint64(workers-1), db.Stats().Handlers["email"].InProgressConflicts)
}

func TestClaimBadInput(t *testing.T) {
	db, _ := openClocked(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		req   oncekv.Request
		lease time.Duration
		want  error
	}{
		{"zero lease", welcome, 0, oncekv.ErrInvalidLease},
		{"negative lease", welcome, -time.Second, oncekv.ErrInvalidLease},
		{"empty handler", oncekv.Request{Key: "k"}, lease, oncekv.ErrHandlerRequired},
		{"empty key", oncekv.Request{Handler: "h"}, lease, oncekv.ErrKeyRequired},
		{"huge key", oncekv.Request{Handler: "h", Key: string(make([]byte, 40000))}, lease, oncekv.ErrKeyTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := db.Claim(ctx, tc.req, tc.lease)
			require.Nil(t, c)
			require.ErrorIs(t, err, tc.want)
			var re *oncekv.RequestError
			require.ErrorAs(t, err, &re)
			require.Equal(t, "claim", re.Op)
		})
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := db.Claim(cancelled, welcome, lease)
	require.ErrorIs(t, err, context.Canceled)
	c := mustClaim(t, db, welcome) // neither bad input nor a cancelled context claimed anything

	require.ErrorIs(t, c.Extend(ctx, 0), oncekv.ErrInvalidLease)
	require.ErrorIs(t, c.Extend(ctx, -time.Second), oncekv.ErrInvalidLease)
	require.ErrorIs(t, c.Extend(cancelled, lease), context.Canceled)
	require.ErrorIs(t, c.Fail(cancelled, nil), context.Canceled)
	require.False(t, c.LeaseUntil().IsZero(), "failed calls leave the claim held")

	// Claims that DB.Claim did not return.
	for name, unknown := range map[string]*oncekv.Claim{"nil": nil, "zero": {}} {
		require.ErrorIs(t, unknown.Extend(ctx, lease), oncekv.ErrUnknownClaim, name)
		_, err := unknown.Complete(ctx, nil, nil)
		require.ErrorIs(t, err, oncekv.ErrUnknownClaim, name)
		require.ErrorIs(t, unknown.Fail(ctx, nil), oncekv.ErrUnknownClaim, name)
		require.Zero(t, unknown.Token(), name)
		require.False(t, unknown.Done(), name)
		require.Zero(t, unknown.Result(), name)
		require.True(t, unknown.LeaseUntil().IsZero(), name)
	}
}

func TestClaimAfterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "closed.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	ctx := context.Background()
	c, err := db.Claim(ctx, welcome, lease)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	_, err = db.Claim(ctx, welcome, lease)
	require.ErrorIs(t, err, oncekv.ErrClosed)
	require.ErrorIs(t, c.Extend(ctx, lease), oncekv.ErrClosed)
	_, err = c.Complete(ctx, []byte("r"), nil)
	require.ErrorIs(t, err, oncekv.ErrClosed)
	require.ErrorIs(t, c.Fail(ctx, nil), oncekv.ErrClosed)
	require.Positive(t, c.Token(), "the accessors still answer")

	// The claim's mark survived, IN_PROGRESS. Reopened with
	// KeepOrphanedClaims, the key is held until the lease runs out; by
	// default the claim belongs to no live process and is released.
	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true, KeepOrphanedClaims: true})
	require.NoError(t, err)
	_, err = db.Claim(ctx, welcome, lease)
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	require.NoError(t, db.Close())
	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	taker, err := db.Claim(ctx, welcome, lease)
	require.NoError(t, err)
	require.Greater(t, taker.Token(), c.Token())
}

// TestClaimsShareCommits: claims, then their Completes, that queue behind
// a commit in progress share the next commit (they ride Apply's group
// commit) instead of committing one by one, and each keeps its own token
// and outcome. A neighbour whose effect fails makes the commit run again
// without it: a Complete's effect then runs twice, its writes and its
// OnCommit hook land once.
func TestClaimsShareCommits(t *testing.T) {
	db, _ := openClocked(t)
	ctx := context.Background()
	const n = 8
	req := func(i int) oncekv.Request {
		return oncekv.Request{Handler: "email", Key: fmt.Sprint("k", i), Payload: []byte("p")}
	}
	// hold runs fn in n goroutines while an Apply's effect holds the
	// commit, and releases it once all n wait in the group commit's queue.
	hold := func(key string, fn func(i int)) {
		t.Helper()
		entered, release := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		var held error
		wg.Go(func() {
			_, held = db.Apply(ctx, oncekv.Request{Handler: "hold", Key: key}, func(*oncekv.Tx) ([]byte, error) {
				close(entered)
				<-release
				return nil, nil
			})
		})
		<-entered
		free := sync.OnceFunc(func() { close(release) })
		defer free() // a failed check below must not leave the store held
		for i := range n {
			wg.Go(func() { fn(i) })
		}
		require.Eventually(t, func() bool { return oncekv.QueuedApplies(db) == n }, hangLimit, time.Millisecond,
			"the calls wait in the group commit's queue")
		free()
		wg.Wait()
		require.NoError(t, held)
	}

	claims := make([]*oncekv.Claim, n)
	errs := make([]error, n)
	before := db.Stats().Commits
	hold("a", func(i int) { claims[i], errs[i] = db.Claim(ctx, req(i), lease) })
	require.Equal(t, before+2, db.Stats().Commits, "the held Apply's commit, then one for the eight claims")
	tokens := map[uint64]bool{}
	for i, c := range claims {
		require.NoError(t, errs[i])
		require.False(t, c.Done())
		tokens[c.Token()] = true
	}
	require.Len(t, tokens, n, "every claim has its own token")

	var runs [n]atomic.Int64
	var hooks [n]atomic.Int64
	errFlaky := errors.New("flaky")
	results := make([]error, n)
	before = db.Stats().Commits
	hold("b", func(i int) {
		_, results[i] = claims[i].Complete(ctx, []byte("sent"), func(tx *oncekv.Tx) error {
			runs[i].Add(1)
			tx.OnCommit(func() { hooks[i].Add(1) })
			b, err := tx.CreateBucketIfNotExists([]byte("sent"))
			if err != nil {
				return err
			}
			if i == n-1 {
				return errFlaky // its neighbours commit without it
			}
			return b.Put([]byte(req(i).Key), []byte("yes"))
		})
	})
	require.LessOrEqual(t, db.Stats().Commits-before, uint64(3), "the held Apply's commit, then the Completes' (run again without the failed one)")
	for i, c := range claims[:n-1] {
		require.NoError(t, results[i])
		require.True(t, c.Done())
		require.Equal(t, int64(1), hooks[i].Load(), "hook %d", i)
		require.LessOrEqual(t, runs[i].Load(), int64(2), "effect %d", i)
	}
	require.ErrorIs(t, results[n-1], errFlaky)
	require.False(t, claims[n-1].Done(), "a failed effect leaves the claim holding the key")
	require.Zero(t, hooks[n-1].Load())
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("sent"))
		require.NotNil(t, b)
		for i := range n {
			want := []byte("yes")
			if i == n-1 {
				want = nil
			}
			require.Equal(t, want, b.Get([]byte(req(i).Key)), "key %d", i)
		}
		return nil
	}))
	_, err := claims[n-1].Complete(ctx, []byte("sent"), nil)
	require.NoError(t, err, "the holder completes on its next try")
}

// TestClaimKeyIsStableAndUnique: Key is a function of (handler, key) alone.
func TestClaimKeyIsStableAndUnique(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	var last *oncekv.Claim
	key := func(h, k string) string {
		c, err := db.Claim(ctx, oncekv.Request{Handler: h, Key: k}, lease)
		require.NoError(t, err)
		last = c
		return c.Key()
	}
	first := key("ab", "c")
	require.Len(t, first, 64)
	require.Regexp(t, "^[0-9a-f]{64}$", first)
	require.NotEqual(t, first, key("a", "bc"), "the handler/key boundary counts")
	require.NotEqual(t, first, key("ab", "d"))
	clock.Advance(time.Hour) // every lease runs out: a takeover
	require.Equal(t, first, key("ab", "c"), "the same after a takeover")
	_, err := last.Complete(ctx, nil, nil)
	require.NoError(t, err)
	require.Equal(t, first, key("ab", "c"), "and for a claim of a done key")
	var nilClaim *oncekv.Claim
	require.Empty(t, nilClaim.Key())
}

// TestClaimCompleteEffectPanicOrGoexitCountsAsEffectError: Stats.EffectErrors
// counts Claim.Complete's effect errors, as Apply's; an effect that panics
// or calls runtime.Goexit is one (Apply counts it so), and the claim still
// holds the key.
func TestClaimCompleteEffectPanicOrGoexitCountsAsEffectError(t *testing.T) {
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
