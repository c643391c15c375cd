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

// markIn runs tx.Mark in its own Update and returns what it returned.
func markIn(t *testing.T, db *oncekv.DB, req oncekv.Request, resp string) (oncekv.Result, error) {
	t.Helper()
	var res oncekv.Result
	var markErr error
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		res, markErr = tx.Mark(req, []byte(resp))
		return nil
	}))
	return res, markErr
}

func TestTxMarkDedupsLikeApply(t *testing.T) {
	ctx := context.Background()
	clock := oncetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := &oncekv.Options{NoSync: true, Now: clock.Now, Retention: 2 * time.Hour, WindowSpan: time.Hour, ExpireInterval: -1}
	path := filepath.Join(t.TempDir(), "m.db")
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)

	req := oncekv.Request{Handler: "outbox", Key: "k1", Payload: []byte("p")}
	res, err := markIn(t, db, req, "first")
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, []byte("first"), res.Response)

	// Marked in a tx: a duplicate for Apply (effect not run) and for Mark.
	res, err = db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
		t.Fatal("effect ran for a key marked in a transaction")
		return nil, nil
	})
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, []byte("first"), res.Response)
	res, err = markIn(t, db, req, "second")
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, []byte("first"), res.Response, "the stored response, not the new one")

	// Key reuse: another payload.
	_, err = markIn(t, db, oncekv.Request{Handler: "outbox", Key: "k1", Payload: []byte("other")}, "x")
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	require.Contains(t, err.Error(), `"k1"`)

	// Applied by Apply: a duplicate for Mark.
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "a"}, func(tx *oncekv.Tx) ([]byte, error) { return []byte("A"), nil })
	require.NoError(t, err)
	res, err = markIn(t, db, oncekv.Request{Handler: "h", Key: "a"}, "B")
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, []byte("A"), res.Response)

	// Rolled back: no mark.
	boom := errors.New("boom")
	require.ErrorIs(t, db.Update(func(tx *oncekv.Tx) error {
		res, err := tx.Mark(oncekv.Request{Handler: "outbox", Key: "rb"}, nil)
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		// A second Mark in the same transaction sees the first.
		res, err = tx.Mark(oncekv.Request{Handler: "outbox", Key: "rb"}, nil)
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		return boom
	}), boom)
	res, err = markIn(t, db, oncekv.Request{Handler: "outbox", Key: "rb"}, "now")
	require.NoError(t, err)
	require.False(t, res.Duplicate, "a rolled-back mark was never written")

	// Across reopen.
	require.NoError(t, db.Close())
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	defer db.Close()
	res, err = markIn(t, db, req, "again")
	require.NoError(t, err)
	require.True(t, res.Duplicate)

	// After the window has expired, the key is new again (documented).
	clock.Advance(4 * time.Hour)
	_, err = db.Expire(ctx)
	require.NoError(t, err)
	res, err = markIn(t, db, req, "after expiry")
	require.NoError(t, err)
	require.False(t, res.Duplicate)
}

func TestTxMarkInsideApplyEffectForAnotherKey(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	effect := func(tx *oncekv.Tx) ([]byte, error) {
		res, err := tx.Mark(oncekv.Request{Handler: "other", Key: "k"}, []byte("o"))
		if err != nil {
			return nil, err
		}
		if res.Duplicate {
			return []byte("dup"), nil
		}
		return []byte("new"), nil
	}
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "1"}, effect)
	require.NoError(t, err)
	require.Equal(t, []byte("new"), res.Response)
	res, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "2"}, effect)
	require.NoError(t, err)
	require.Equal(t, []byte("dup"), res.Response, "the mark of the first Apply committed with it")

	// A failed effect rolls its mark back.
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "3"}, func(tx *oncekv.Tx) ([]byte, error) {
		_, err := tx.Mark(oncekv.Request{Handler: "other", Key: "z"}, nil)
		require.NoError(t, err)
		return nil, errors.New("transient")
	})
	require.Error(t, err)
	res, err = markIn(t, db, oncekv.Request{Handler: "other", Key: "z"}, "")
	require.NoError(t, err)
	require.False(t, res.Duplicate)

	// Its own key is refused, not silently overwritten.
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "4"}, func(tx *oncekv.Tx) ([]byte, error) {
		_, err := tx.Mark(oncekv.Request{Handler: "h", Key: "4"}, nil)
		return nil, err
	})
	require.Error(t, err)
	require.ErrorIs(t, err, oncekv.ErrMarkOwnKey)
}

func TestTxMarkBadInputChangesNothing(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		_, err := tx.Mark(oncekv.Request{Key: "k"}, nil)
		require.ErrorIs(t, err, oncekv.ErrHandlerRequired)
		_, err = tx.Mark(oncekv.Request{Handler: "h"}, nil)
		require.ErrorIs(t, err, oncekv.ErrKeyRequired)
		_, err = tx.Mark(oncekv.Request{Handler: "h", Key: string(make([]byte, 40000))}, nil)
		require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
		return nil
	}))
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		_, err := tx.Mark(oncekv.Request{Handler: "h", Key: "k"}, nil)
		require.ErrorIs(t, err, oncekv.ErrTxNotWritable)
		return nil
	}))
	st := db.Stats()
	require.Equal(t, uint64(0), st.Total.Applied)
}

func TestTxMarkCountsOnlyCommitted(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	_ = db.Update(func(tx *oncekv.Tx) error {
		_, _ = tx.Mark(oncekv.Request{Handler: "h", Key: "k"}, nil)
		return errors.New("rollback")
	})
	require.Equal(t, uint64(0), db.Stats().Handlers["h"].Applied)
	_, err := markIn(t, db, oncekv.Request{Handler: "h", Key: "k"}, "")
	require.NoError(t, err)
	_, err = markIn(t, db, oncekv.Request{Handler: "h", Key: "k"}, "")
	require.NoError(t, err)
	require.Equal(t, uint64(1), db.Stats().Handlers["h"].Applied)
	require.Equal(t, uint64(1), db.Stats().Handlers["h"].DuplicatesSuppressed)
}

func TestTxLookupMarkWritesNothing(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	req := oncekv.Request{Handler: "h", Key: "k", Payload: []byte("p")}
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		_, found, err := tx.LookupMark(req)
		require.NoError(t, err)
		require.False(t, found)
		return nil
	}))
	_, err := markIn(t, db, req, "r")
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		res, found, err := tx.LookupMark(req)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, []byte("r"), res.Response)
		_, found, err = tx.LookupMark(oncekv.Request{Handler: "h", Key: "k", Payload: []byte("q")})
		require.True(t, found)
		require.ErrorIs(t, err, oncekv.ErrKeyReuse)
		_, _, err = tx.LookupMark(oncekv.Request{Handler: "h"})
		require.ErrorIs(t, err, oncekv.ErrKeyRequired)
		return nil
	}))
}

// Adversarial review of issue 11's cache of final marks and write path:
// each test here failed on the code it was written against.

// TestTxMarkTakeoverKeepsRetention: Tx.Mark that takes over an
// expired claim writes a DONE mark now, so the key must stay deduplicated
// for Retention from now, as Apply's takeover and a late Complete do. The
// mark must not stay in the claim's old window, which expires sooner.
func TestTxMarkTakeoverKeepsRetention(t *testing.T) {
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

// TestTxMarkOwnKeyInCompleteEffect: Complete's effect runs in the
// transaction that writes the claim's DONE mark, as Apply's effect does, so
// Tx.Mark of the claim's own key there is ErrMarkOwnKey and writes
// nothing, whether the lease is live or has run out (the holder may still
// complete then): the mark is Complete's to write.
func TestTxMarkOwnKeyInCompleteEffect(t *testing.T) {
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

// TestTxMarkRefusesAResponseApplyWouldRefuse: Tx.Mark records a key
// "exactly as Apply would", so a response larger than a mark can hold is
// ErrResponseTooLarge there too, and writes nothing.
func TestTxMarkRefusesAResponseApplyWouldRefuse(t *testing.T) {
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
