package oncekv_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
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

// The operator's API: DB.Marks, DB.Check, DB.ExpireDue, DB.LoadMarks (what
// cmd/oncekv is built on).

func applyOp(t *testing.T, db *oncekv.DB, handler, key, response string) {
	t.Helper()
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: handler, Key: key, Payload: []byte(key)},
		func(*oncekv.Tx) ([]byte, error) { return []byte(response), nil })
	require.NoError(t, err)
}

// advance moves the store's clock on by d in steps the store believes at
// once (under Options.MaxClockJump), as a running store's clock moves.
func advance(db *oncekv.DB, clock *oncetest.Clock, d time.Duration) {
	for ; d > 0; d -= 12 * time.Hour {
		clock.Advance(min(d, 12*time.Hour))
		db.Now()
	}
}

// listMarks returns "handler/key" of every mark filter selects, in order.
func listMarks(t *testing.T, db *oncekv.DB, filter oncekv.MarkFilter) []string {
	t.Helper()
	var got []string
	require.NoError(t, db.Marks(filter, func(m oncekv.MarkInfo) error {
		got = append(got, m.Handler+"/"+m.Key)
		return nil
	}))
	return got
}

func TestMarksFilter(t *testing.T) {
	db, clock := openClocked(t)
	applyOp(t, db, "pay", "a", "ok")
	applyOp(t, db, "payment", "a", "ok") // "pay" is a prefix of it: another handler all the same
	mustClaim(t, db, oncekv.Request{Handler: "pay", Key: "c"})
	clock.Advance(2 * time.Hour)
	applyOp(t, db, "pay", "d", "ok")
	windows := db.Stats().Windows
	require.Len(t, windows, 2)

	require.Equal(t, []string{"pay/a", "pay/c", "payment/a", "pay/d"}, listMarks(t, db, oncekv.MarkFilter{}))
	require.Equal(t, []string{"pay/a", "pay/c", "pay/d"}, listMarks(t, db, oncekv.MarkFilter{Handler: "pay"}))
	require.Empty(t, listMarks(t, db, oncekv.MarkFilter{Handler: "pa"}))
	require.Equal(t, []string{"pay/c"}, listMarks(t, db, oncekv.MarkFilter{State: oncekv.MarkInProgress}))
	require.Equal(t, []string{"pay/d"}, listMarks(t, db, oncekv.MarkFilter{Window: windows[1].Start}))
	require.Equal(t, []string{"pay/a"}, listMarks(t, db, oncekv.MarkFilter{Handler: "pay", State: oncekv.MarkDone, Window: windows[0].Start}))

	stop := errors.New("stop")
	calls := 0
	require.ErrorIs(t, db.Marks(oncekv.MarkFilter{}, func(oncekv.MarkInfo) error { calls++; return stop }), stop)
	require.Equal(t, 1, calls)
	require.ErrorIs(t, db.Marks(oncekv.MarkFilter{Handler: strings.Repeat("h", 1<<16)}, func(oncekv.MarkInfo) error { return nil }), oncekv.ErrKeyTooLarge)
}

// TestMarksUnderWrites lists while writers apply: each listing is one
// snapshot, so it sees every mark committed before it began, and no error.
func TestMarksUnderWrites(t *testing.T) {
	db, _ := openClocked(t)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				applyOp(t, db, "h", fmt.Sprint(w, "-", i), "ok")
			}
		})
	}
	for range 20 {
		before := db.Stats().LiveMarks
		require.GreaterOrEqual(t, uint64(len(listMarks(t, db, oncekv.MarkFilter{}))), before)
	}
	wg.Wait()
	require.Len(t, listMarks(t, db, oncekv.MarkFilter{}), 200)
}

func TestMarksClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.ErrorIs(t, db.Marks(oncekv.MarkFilter{}, func(oncekv.MarkInfo) error { return nil }), oncekv.ErrClosed)
	require.ErrorIs(t, db.Check(func(error) error { return nil }), oncekv.ErrClosed)
	_, err = db.ExpireDue()
	require.ErrorIs(t, err, oncekv.ErrClosed)
	_, err = db.LoadMarks(nil)
	require.ErrorIs(t, err, oncekv.ErrClosed)
}

func TestLoadMarksRoundTrip(t *testing.T) {
	src, clock := openClocked(t)
	applyOp(t, src, "pay", "a", "ok")
	_, err := src.Apply(context.Background(), oncekv.Request{Handler: "pay", Key: "f"},
		func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(errors.New("declined")) })
	require.ErrorIs(t, err, oncekv.ErrFailed)
	clock.Advance(2 * time.Hour)
	applyOp(t, src, "pay", "b", "")
	var marks []oncekv.MarkInfo
	require.NoError(t, src.Marks(oncekv.MarkFilter{}, func(m oncekv.MarkInfo) error { marks = append(marks, m); return nil }))
	require.Len(t, marks, 3)

	path := filepath.Join(t.TempDir(), "moved.db")
	dst, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now})
	require.NoError(t, err)
	n, err := dst.LoadMarks(marks)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	var again []oncekv.MarkInfo
	require.NoError(t, dst.Marks(oncekv.MarkFilter{}, func(m oncekv.MarkInfo) error { again = append(again, m); return nil }))
	require.Equal(t, marks, again)

	// Loading a key twice is refused, and the whole batch writes nothing.
	n, err = dst.LoadMarks([]oncekv.MarkInfo{{Handler: "pay", Key: "new", State: oncekv.MarkDone, FirstSeen: clock.Now()}, marks[0]})
	require.ErrorIs(t, err, fs.ErrExist)
	require.Zero(t, n)
	_, err = dst.Mark("pay", "new")
	require.ErrorIs(t, err, oncekv.ErrNotFound)

	bad := []oncekv.MarkInfo{
		{Handler: "pay", Key: "c", State: oncekv.MarkInProgress, FirstSeen: clock.Now(), Token: 7},
		{Handler: "pay", Key: "c", State: 9, FirstSeen: clock.Now()},
		{Handler: "", Key: "c", State: oncekv.MarkDone, FirstSeen: clock.Now()},
	}
	for i, want := range []error{oncekv.ErrInProgress, oncekv.ErrInvalidMark, oncekv.ErrHandlerRequired} {
		_, err := dst.LoadMarks(bad[i : i+1])
		require.ErrorIs(t, err, want)
	}
	require.NoError(t, dst.Close())

	// After a reopen (filters from the file) the loaded keys are duplicates.
	dst, err = oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now})
	require.NoError(t, err)
	defer dst.Close()
	res, err := dst.Apply(context.Background(), oncekv.Request{Handler: "pay", Key: "a", Payload: []byte("a")}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "ok", string(res.Response))
	_, err = dst.Apply(context.Background(), oncekv.Request{Handler: "pay", Key: "f"}, nil)
	require.ErrorIs(t, err, oncekv.ErrFailed)

	// A mark past this store's retention is skipped, not revived.
	clock.Advance(oncekv.DefaultRetention - time.Hour)
	late, err := oncekv.Open(filepath.Join(t.TempDir(), "late.db"), &oncekv.Options{NoSync: true, Now: clock.Now})
	require.NoError(t, err)
	defer late.Close()
	n, err = late.LoadMarks(marks)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = late.Mark("pay", "a")
	require.ErrorIs(t, err, oncekv.ErrNotFound)

	ro, err := oncekv.Open(filepath.Join(t.TempDir(), "ro.db"), nil)
	require.NoError(t, err)
	roPath := ro.Path()
	require.NoError(t, ro.Close())
	ro, err = oncekv.Open(roPath, &oncekv.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	_, err = ro.LoadMarks(marks)
	require.ErrorIs(t, err, oncekv.ErrReadOnly)
}

// TestLoadMarksAcrossWindowsKeepsSealedFilters: LoadMarks writes, in one
// transaction, marks of the newest window and then of a newer one, which
// seals the newest window and persists its filter. That filter must hold
// the marks the same call wrote into the window just before: after a
// reopen, which loads it instead of reading the window's keys, each of
// them is still a duplicate (the filters are in charge, no hook). Marks
// given out of order (an older window's after a newer one's) must not
// slip into a window whose filter was already persisted either.
func TestLoadMarksAcrossWindowsKeepsSealedFilters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order []int // the window of each mark, in hours after the first
	}{
		{"oldest first", []int{0, 0, 1, 1, 2}},
		{"out of order", []int{0, 1, 0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clock := oncetest.NewClock(newestFilterEpoch)
			path := filepath.Join(t.TempDir(), "x.db")
			opts := newestFilterOpts(clock)
			db, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			applyKey(t, db, "first") // the newest window: the first hour's
			var marks []oncekv.MarkInfo
			first := newestFilterEpoch.Truncate(time.Hour)
			for i, h := range tc.order {
				key := fmt.Sprint("loaded-", i)
				sum := sha256.Sum256([]byte(key))
				marks = append(marks, oncekv.MarkInfo{Handler: "h", Key: key, State: oncekv.MarkDone,
					Fingerprint: sum, Response: []byte(key), FirstSeen: first.Add(time.Duration(h)*time.Hour + time.Minute)})
			}
			clock.Advance(3 * time.Hour)
			n, err := db.LoadMarks(marks)
			require.NoError(t, err)
			require.Equal(t, len(marks), n)
			require.NoError(t, db.Close())

			for range 2 { // the reopen loads the sealed filters; the next one too
				db, err = oncekv.Open(path, opts)
				require.NoError(t, err)
				for _, m := range marks {
					res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: m.Key, Payload: []byte(m.Key)}, mustNotRunApply(t))
					require.NoError(t, err, m.Key)
					require.True(t, res.Duplicate, "%s: loaded, then run as new after a reopen", m.Key)
				}
				require.NoError(t, db.Close())
			}
		})
	}
}

func TestForget(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	applyKey(t, db, "k")
	require.NoError(t, db.Forget("h", "k"))
	require.Zero(t, db.Stats().LiveMarks)
	require.False(t, applyKey(t, db, "k").Duplicate, "a forgotten key is applied again")
	require.Equal(t, uint64(2), balance(t, db, "acct"))
	require.NoError(t, db.Forget("h", "never-seen"))
	require.ErrorIs(t, db.Forget("", "k"), oncekv.ErrHandlerRequired)
	require.ErrorIs(t, db.Forget("h", ""), oncekv.ErrKeyRequired)
	require.True(t, applyKey(t, db, "k").Duplicate)

	// A key under a live claim stays: its holder is still working on it.
	c, err := db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: "claimed"}, time.Minute)
	require.NoError(t, err)
	require.ErrorIs(t, db.Forget("h", "claimed"), oncekv.ErrInProgress)
	_, err = c.Complete(context.Background(), []byte("done"), nil)
	require.NoError(t, err, "the holder is not disturbed by the refused Forget")
}

// TestForgetKeepsTheMarkCountExact: the window's mark count follows every
// Apply and Forget exactly (Forget of a key without a mark changes
// nothing), so it can never go below the number of marks.
func TestForgetKeepsTheMarkCountExact(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	const n = 40
	for i := range n {
		_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint(i)}, nil)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Each key forgotten twice, concurrently: only one finds a mark.
			for range 2 {
				if err := db.Forget("h", fmt.Sprint(i/2*2)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, uint64(n/2), db.Stats().LiveMarks)
	require.NoError(t, db.Forget("h", "never seen"))
	require.Equal(t, uint64(n/2), db.Stats().LiveMarks)
}
