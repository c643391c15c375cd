package oncekv_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

func TestMarkLookup(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()

	done := oncekv.Request{Handler: "deposit", Key: "d-1", Payload: []byte("100")}
	_, err := db.Apply(ctx, done, func(*oncekv.Tx) ([]byte, error) { return []byte("ok"), nil })
	require.NoError(t, err)
	info, err := db.Mark("deposit", "d-1")
	require.NoError(t, err)
	require.Equal(t, oncekv.MarkDone, info.State)
	require.Equal(t, "DONE", info.State.String())
	require.Equal(t, "deposit", info.Handler)
	require.Equal(t, "d-1", info.Key)
	require.Equal(t, claimEpoch, info.FirstSeen)
	require.False(t, info.Window.After(info.FirstSeen))
	sum := sha256.Sum256(done.Payload)
	require.Equal(t, sum[:16], info.Fingerprint[:16], "a mark keeps the first 16 bytes of the SHA-256")
	require.Equal(t, make([]byte, 16), info.Fingerprint[16:])
	require.Equal(t, "ok", string(info.Response))
	require.Zero(t, info.Token)
	require.True(t, info.LeaseUntil.IsZero())
	info.Response[0] = 'X' // the caller's copy
	again, err := db.Mark("deposit", "d-1")
	require.NoError(t, err)
	require.Equal(t, "ok", string(again.Response))

	failed := oncekv.Request{Handler: "deposit", Key: "d-2"}
	_, err = db.Apply(ctx, failed, func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(errors.New("card declined")) })
	require.ErrorIs(t, err, oncekv.ErrFailed)
	info, err = db.Mark("deposit", "d-2")
	require.NoError(t, err)
	require.Equal(t, oncekv.MarkFailed, info.State)
	require.Equal(t, "FAILED", info.State.String())
	require.Equal(t, "card declined", info.Error)

	c := mustClaim(t, db, welcome)
	info, err = db.Mark(welcome.Handler, welcome.Key)
	require.NoError(t, err)
	require.Equal(t, oncekv.MarkInProgress, info.State)
	require.Equal(t, "IN_PROGRESS", info.State.String())
	require.Equal(t, c.Token(), info.Token)
	require.Equal(t, c.LeaseUntil(), info.LeaseUntil)
	require.Equal(t, c.Key(), info.ClaimKey)
	require.False(t, info.Released)
	require.False(t, info.Orphaned)
	clock.Advance(time.Second)
	require.NoError(t, c.Fail(ctx, errors.New("gateway timeout")))
	info, err = db.Mark(welcome.Handler, welcome.Key)
	require.NoError(t, err)
	require.True(t, info.Released, "a transient Fail releases the claim")
	require.True(t, info.LeaseUntil.IsZero())

	_, err = db.Mark("deposit", "never")
	require.ErrorIs(t, err, oncekv.ErrNotFound)
	require.Contains(t, err.Error(), `"never"`)
	_, err = db.Mark("", "k")
	require.ErrorIs(t, err, oncekv.ErrHandlerRequired)
	_, err = db.Mark("h", "")
	require.ErrorIs(t, err, oncekv.ErrKeyRequired)
	_, err = db.Mark("h", strings.Repeat("k", 40000))
	require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)

	require.NoError(t, db.Forget("deposit", "d-1"))
	_, err = db.Mark("deposit", "d-1")
	require.ErrorIs(t, err, oncekv.ErrNotFound)
	require.Equal(t, "State(9)", oncekv.MarkState(9).String())
}

func TestMarkAfterClose(t *testing.T) {
	db, err := oncekv.Open(t.TempDir()+"/c.db", nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = db.Mark("h", "k")
	require.ErrorIs(t, err, oncekv.ErrClosed)
	require.ErrorIs(t, db.Claims(func(oncekv.MarkInfo) error { return nil }), oncekv.ErrClosed)
	require.ErrorIs(t, db.ReleaseClaim("h", "k", 1), oncekv.ErrClosed)
}

// TestClaimsListAndRelease is the operator's path: list the claims in
// progress, release one by its token, and the key is taken over at once.
func TestClaimsListAndRelease(t *testing.T) {
	db, _ := openClocked(t)
	ctx := context.Background()
	tokens := map[string]uint64{}
	for _, k := range []string{"a", "b", "c"} {
		tokens[k] = mustClaim(t, db, oncekv.Request{Handler: "email", Key: k}).Token()
	}
	_, err := db.Apply(ctx, oncekv.Request{Handler: "email", Key: "done"}, nil)
	require.NoError(t, err)

	listed := map[string]uint64{}
	require.NoError(t, db.Claims(func(m oncekv.MarkInfo) error {
		require.Equal(t, oncekv.MarkInProgress, m.State)
		listed[m.Key] = m.Token
		return nil
	}))
	require.Equal(t, tokens, listed, "every claim in progress, and nothing else")

	stop := errors.New("stop")
	calls := 0
	require.ErrorIs(t, db.Claims(func(oncekv.MarkInfo) error { calls++; return stop }), stop)
	require.Equal(t, 1, calls)

	// The key is held: nobody else gets it until it is released.
	_, err = db.Claim(ctx, oncekv.Request{Handler: "email", Key: "b"}, lease)
	require.ErrorIs(t, err, oncekv.ErrInProgress)

	err = db.ReleaseClaim("email", "b", tokens["b"]-1)
	require.ErrorIs(t, err, oncekv.ErrFenced)
	var fe *oncekv.FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, tokens["b"], fe.Stored)
	require.ErrorIs(t, db.ReleaseClaim("email", "b", tokens["b"]+1), oncekv.ErrFenced)
	require.ErrorIs(t, db.ReleaseClaim("email", "done", 1), oncekv.ErrClaimDone)
	require.ErrorIs(t, db.ReleaseClaim("email", "nope", 1), oncekv.ErrNotFound)
	require.ErrorIs(t, db.ReleaseClaim("", "b", 1), oncekv.ErrHandlerRequired)

	require.NoError(t, db.ReleaseClaim("email", "b", tokens["b"]))
	info, err := db.Mark("email", "b")
	require.NoError(t, err)
	require.True(t, info.Released)
	c, err := db.Claim(ctx, oncekv.Request{Handler: "email", Key: "b"}, lease)
	require.NoError(t, err, "released: taken over at once")
	require.Greater(t, c.Token(), tokens["c"])
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

// TestMarkWhileWriting: look-ups run beside writers and see each key
// either without a mark or DONE with its response, never anything between.
func TestMarkWhileWriting(t *testing.T) {
	db, _ := openClocked(t)
	const keys = 200
	var wg sync.WaitGroup
	errs := make(chan error, keys*2)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += 4 {
				k := fmt.Sprint("k", i)
				if _, err := db.Apply(context.Background(), oncekv.Request{Handler: "w", Key: k},
					func(*oncekv.Tx) ([]byte, error) { return []byte(k), nil }); err != nil {
					errs <- err
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				k := fmt.Sprint("k", i)
				info, err := db.Mark("w", k)
				switch {
				case errors.Is(err, oncekv.ErrNotFound):
				case err != nil:
					errs <- err
				case info.State != oncekv.MarkDone || string(info.Response) != k:
					errs <- fmt.Errorf("key %s: %v %q", k, info.State, info.Response)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range keys {
		info, err := db.Mark("w", fmt.Sprint("k", i))
		require.NoError(t, err)
		require.Equal(t, oncekv.MarkDone, info.State)
	}
}
