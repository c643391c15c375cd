package oncekv_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

var accounts = []byte("accounts")

// deposit is the article's non-idempotent effect: a read-modify-write
// increment. Applied twice, it counts twice; the store must not let it.
func deposit(account string, amount uint64) func(tx *oncekv.Tx) ([]byte, error) {
	return func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists(accounts)
		if err != nil {
			return nil, err
		}
		balance := readUint(b.Get([]byte(account))) + amount
		if err := b.Put([]byte(account), uintBytes(balance)); err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, "%s=%d", account, balance), nil
	}
}

func balance(t testing.TB, db *oncekv.DB, account string) uint64 {
	t.Helper()
	var n uint64
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		if b := tx.Bucket(accounts); b != nil {
			n = readUint(b.Get([]byte(account)))
		}
		return nil
	}))
	return n
}

func uintBytes(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func readUint(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func TestApplyRunsEffectOnceAndReplaysResponse(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	req := oncekv.Request{Handler: "deposit", Key: "dep-1", Payload: []byte(`{"amount":100}`)}

	first, err := db.Apply(ctx, req, deposit("alice", 100))
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	require.Equal(t, "alice=100", string(first.Response))
	require.False(t, first.FirstSeen.IsZero())

	commits := db.Stats().Commits
	for range 3 {
		again, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) {
			t.Fatal("the effect ran for a duplicate")
			return nil, nil
		})
		require.NoError(t, err)
		require.True(t, again.Duplicate)
		require.Equal(t, first.Response, again.Response)
		require.True(t, first.FirstSeen.Equal(again.FirstSeen))
	}
	require.Equal(t, commits, db.Stats().Commits, "a duplicate commits nothing, so it costs no fsync")
	require.Equal(t, uint64(100), balance(t, db, "alice"))

	st := db.Stats()
	require.Equal(t, uint64(1), st.Handlers["deposit"].Applied)
	require.Equal(t, uint64(3), st.Handlers["deposit"].DuplicatesSuppressed)
	require.Equal(t, st.Handlers["deposit"], st.Total)
}

func TestApplyResponseIsCallersCopy(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "k"}

	// The effect returns a slice of a bucket value, which bbolt owns only
	// until the transaction ends.
	res, err := db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return nil, err
		}
		if err := b.Put([]byte("x"), []byte("stored-value")); err != nil {
			return nil, err
		}
		return b.Get([]byte("x")), nil
	})
	require.NoError(t, err)
	require.Equal(t, "stored-value", string(res.Response))
	res.Response[0] = 'X'

	dup, err := db.Apply(ctx, req, nil)
	require.NoError(t, err)
	require.Equal(t, "stored-value", string(dup.Response), "mutating a result must not change the stored response")
	require.NoError(t, db.Close())
	require.Equal(t, "stored-value", string(dup.Response), "a response must stay valid after Close")
}

func TestApplyNilAndEmptyResponsesStayDistinct(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	for _, tc := range []struct {
		key  string
		resp []byte
	}{{"nil", nil}, {"empty", []byte{}}, {"one", []byte{0}}} {
		_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: tc.key}, func(*oncekv.Tx) ([]byte, error) { return tc.resp, nil })
		require.NoError(t, err)
		dup, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: tc.key}, nil)
		require.NoError(t, err)
		require.True(t, dup.Duplicate)
		require.Equal(t, tc.resp == nil, dup.Response == nil, tc.key)
		require.Equal(t, len(tc.resp), len(dup.Response), tc.key)
	}
}

func TestApplyKeyReuseChangesNothing(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	_, err := db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "dep-7", Payload: []byte("100")}, deposit("bob", 100))
	require.NoError(t, err)

	_, err = db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "dep-7", Payload: []byte("999")}, deposit("bob", 999))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	var re *oncekv.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "deposit", re.Handler)
	require.Equal(t, "dep-7", re.Key)
	require.Contains(t, err.Error(), `"deposit"`)
	require.Contains(t, err.Error(), `"dep-7"`)
	require.Equal(t, uint64(100), balance(t, db, "bob"))
	require.Equal(t, uint64(1), db.Stats().Handlers["deposit"].KeyReuses)

	// nil and empty payloads hash alike: both are "no content".
	_, err = db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "dep-8"}, nil)
	require.NoError(t, err)
	res, err := db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "dep-8", Payload: []byte{}}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
}

func TestApplyScopeIsHandlerAndKey(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	// One event processed by three handlers: three effects, not one.
	for _, h := range []string{"billing", "email", "audit"} {
		res, err := db.Apply(ctx, oncekv.Request{Handler: h, Key: "evt-1"}, deposit(h, 1))
		require.NoError(t, err)
		require.False(t, res.Duplicate, h)
	}
	// A handler that ends where the key starts must not collide.
	_, err := db.Apply(ctx, oncekv.Request{Handler: "ab", Key: "c"}, nil)
	require.NoError(t, err)
	res, err := db.Apply(ctx, oncekv.Request{Handler: "a", Key: "bc"}, nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
}

func TestApplyTransientErrorRollsBackAndRecordsNothing(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	req := oncekv.Request{Handler: "deposit", Key: "dep-1", Payload: []byte("50")}
	errUpstream := errors.New("upstream timeout")

	_, err := db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
		if _, err := deposit("carol", 50)(tx); err != nil {
			return nil, err
		}
		return nil, errUpstream // after writing: the write must be rolled back
	})
	require.ErrorIs(t, err, errUpstream)
	require.Zero(t, balance(t, db, "carol"))

	res, err := db.Apply(ctx, req, deposit("carol", 50))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "a failed attempt must leave no mark")
	require.Equal(t, uint64(50), balance(t, db, "carol"))
	require.Equal(t, uint64(1), db.Stats().Total.EffectErrors)
}

func TestApplyPermanentErrorIsRecordedAndReplayed(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	req := oncekv.Request{Handler: "charge", Key: "ch-1", Payload: []byte("card=expired")}
	errDeclined := errors.New("card declined")

	_, err := db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
		if _, err := deposit("dave", 10)(tx); err != nil {
			return nil, err
		}
		return nil, oncekv.Permanent(errDeclined)
	})
	require.ErrorIs(t, err, oncekv.ErrFailed)
	require.ErrorIs(t, err, errDeclined, "the failing call sees its own error")
	require.Zero(t, balance(t, db, "dave"), "the effect's writes must be rolled back")

	res, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) {
		t.Fatal("the effect ran again for a FAILED key")
		return nil, nil
	})
	require.ErrorIs(t, err, oncekv.ErrFailed)
	require.True(t, res.Duplicate)
	var fe *oncekv.FailedError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "card declined", fe.Message)
	require.Contains(t, err.Error(), "card declined")

	c := db.Stats().Handlers["charge"]
	require.Equal(t, uint64(1), c.FailedRecorded)
	require.Equal(t, uint64(1), c.FailedReplayed)
	require.Nil(t, oncekv.Permanent(nil))
	require.False(t, oncekv.IsPermanent(errDeclined))
}

func TestApplyContextDoneAppliesNothing(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	req := oncekv.Request{Handler: "deposit", Key: "dep-1"}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := db.Apply(cancelled, req, func(*oncekv.Tx) ([]byte, error) {
		t.Fatal("effect ran under a cancelled context")
		return nil, nil
	})
	require.ErrorIs(t, err, context.Canceled)

	// Cancelled while the effect runs, before the commit.
	ctx, cancel := context.WithCancel(context.Background())
	_, err = db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
		resp, err := deposit("erin", 5)(tx)
		cancel()
		return resp, err
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, balance(t, db, "erin"))

	res, err := db.Apply(context.Background(), req, deposit("erin", 5))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, uint64(5), balance(t, db, "erin"))
}

func TestApplyEffectPanicRollsBackAndPropagates(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	req := oncekv.Request{Handler: "h", Key: "k"}
	require.PanicsWithValue(t, "boom", func() {
		_, _ = db.Apply(context.Background(), req, func(tx *oncekv.Tx) ([]byte, error) {
			_, _ = deposit("frank", 1)(tx)
			panic("boom")
		})
	})
	require.Zero(t, balance(t, db, "frank"))
	res, err := db.Apply(context.Background(), req, deposit("frank", 1))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
}

func TestApplyMarksSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reopen.db")
	ctx := context.Background()
	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	req := oncekv.Request{Handler: "deposit", Key: "dep-1", Payload: []byte("1")}
	first, err := db.Apply(ctx, req, deposit("gina", 1))
	require.NoError(t, err)
	require.NoError(t, db.Close())

	db, err = oncekv.Open(path, nil)
	require.NoError(t, err)
	again, err := db.Apply(ctx, req, deposit("gina", 1))
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.Response, again.Response)
	require.Equal(t, uint64(1), balance(t, db, "gina"))
	require.NoError(t, db.Close())
	oncetest.Check(t, path)
}

func TestApplyBadInput(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	limit := 32766 // bbolt's key limit less the handler length prefix
	cases := []struct {
		name string
		req  oncekv.Request
		want error
	}{
		{"empty handler", oncekv.Request{Key: "k"}, oncekv.ErrHandlerRequired},
		{"empty key", oncekv.Request{Handler: "h"}, oncekv.ErrKeyRequired},
		{"key one byte over", oncekv.Request{Handler: "h", Key: strings.Repeat("k", limit)}, oncekv.ErrKeyTooLarge},
		{"huge key", oncekv.Request{Handler: "h", Key: strings.Repeat("k", 1<<20)}, oncekv.ErrKeyTooLarge},
		{"huge handler", oncekv.Request{Handler: strings.Repeat("h", 70000), Key: "k"}, oncekv.ErrKeyTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := db.Apply(ctx, tc.req, func(*oncekv.Tx) ([]byte, error) {
				t.Fatal("effect ran for bad input")
				return nil, nil
			})
			require.ErrorIs(t, err, tc.want)
			var re *oncekv.RequestError
			require.ErrorAs(t, err, &re)
			require.LessOrEqual(t, len(err.Error()), 300, "a huge key must not make a huge message")
		})
	}
	// Exactly at the limit is fine, including invalid UTF-8.
	key := strings.Repeat("\xff", limit-1)
	_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, nil)
	require.NoError(t, err)
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, uint64(len(cases)), db.Stats().Total.InvalidRequests)
}

func TestApplyBatchGivesEachRequestItsOwnResult(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	_, err := db.Apply(ctx, oncekv.Request{Handler: "dep", Key: "old", Payload: []byte("1")}, deposit("acct", 1))
	require.NoError(t, err)

	errFlaky := errors.New("flaky")
	reqs := []oncekv.Request{
		{Handler: "dep", Key: "a", Payload: []byte("10")},     // 0 applied
		{Handler: "dep", Key: "old", Payload: []byte("1")},    // 1 duplicate of a committed key
		{Handler: "dep", Key: "a", Payload: []byte("10")},     // 2 duplicate within the batch
		{Handler: "", Key: "x"},                               // 3 invalid
		{Handler: "dep", Key: "flaky", Payload: []byte("20")}, // 4 transient error
		{Handler: "dep", Key: "bad", Payload: []byte("30")},   // 5 permanent error
		{Handler: "dep", Key: "old", Payload: []byte("999")},  // 6 key reuse
		{Handler: "dep", Key: "b", Payload: []byte("100")},    // 7 applied
	}
	amounts := []uint64{10, 1, 10, 0, 20, 30, 999, 100}
	runs := make([]int, len(reqs))
	results, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
		runs[i]++
		resp, err := deposit("acct", amounts[i])(tx)
		switch reqs[i].Key {
		case "flaky":
			return nil, errFlaky
		case "bad":
			return nil, oncekv.Permanent(errors.New("rejected"))
		}
		return resp, err
	})
	require.NoError(t, err)
	require.Len(t, results, len(reqs))

	require.NoError(t, results[0].Err)
	require.False(t, results[0].Duplicate)
	require.NoError(t, results[1].Err)
	require.True(t, results[1].Duplicate)
	require.Equal(t, "acct=1", string(results[1].Response))
	require.NoError(t, results[2].Err)
	require.True(t, results[2].Duplicate)
	require.Equal(t, results[0].Response, results[2].Response)
	require.ErrorIs(t, results[3].Err, oncekv.ErrHandlerRequired)
	require.ErrorIs(t, results[4].Err, errFlaky)
	require.ErrorIs(t, results[5].Err, oncekv.ErrFailed)
	require.ErrorIs(t, results[6].Err, oncekv.ErrKeyReuse)
	require.NoError(t, results[7].Err)

	require.Equal(t, uint64(1+10+100), balance(t, db, "acct"))
	require.Zero(t, runs[1]+runs[2]+runs[3]+runs[6], "duplicates and bad requests never run the effect")

	// The failures were recorded as promised: flaky left nothing, bad is FAILED.
	res, err := db.Apply(ctx, reqs[4], deposit("acct", 20))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	_, err = db.Apply(ctx, reqs[5], nil)
	require.ErrorIs(t, err, oncekv.ErrFailed)
	require.Equal(t, uint64(131), balance(t, db, "acct"))
}

func TestApplyBatchContextDoneAppliesNothing(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	_, err := db.ApplyBatch(ctx, []oncekv.Request{{Handler: "h", Key: "k"}}, func(*oncekv.Tx, int) ([]byte, error) {
		ran = true
		return nil, nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, ran, "effect ran")

	res, err := db.ApplyBatch(context.Background(), nil, nil)
	require.NoError(t, err)
	require.Empty(t, res)
}

// TestApplyBatchRepeatsAKeyAfterManyMarks: a key that comes again later in
// the same ApplyBatch is a duplicate, whether the transaction has written
// a few marks before it (looked up one by one) or many (looked up by hash):
// its effect runs once and the repeat gets the first response back.
func TestApplyBatchRepeatsAKeyAfterManyMarks(t *testing.T) {
	for _, n := range []int{3, 40} {
		t.Run(fmt.Sprint(n, " keys"), func(t *testing.T) {
			db := oncetest.Open(t, &oncekv.Options{NoSync: true})
			var reqs []oncekv.Request
			for i := range n {
				reqs = append(reqs, oncekv.Request{Handler: "h", Key: fmt.Sprint("k", i)})
			}
			reqs = append(reqs, reqs[1], reqs[n-1])
			runs := map[string]int{}
			res, err := db.ApplyBatch(context.Background(), reqs, func(_ *oncekv.Tx, i int) ([]byte, error) {
				runs[reqs[i].Key]++
				return []byte(reqs[i].Key), nil
			})
			require.NoError(t, err)
			for i, r := range res {
				require.NoError(t, r.Err)
				require.Equal(t, []byte(reqs[i].Key), r.Response)
				require.Equal(t, i >= n, r.Duplicate, "request %d", i)
			}
			for _, req := range reqs {
				require.Equal(t, 1, runs[req.Key], "effect runs of %s", req.Key)
			}
		})
	}
}

// TestSettledRequestIsNotKeptReachable: once Apply has returned, the store
// keeps no reference to its request's payload or response (a 100 MiB
// response must not stay in memory until the next write).
func TestSettledRequestIsNotKeptReachable(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	for _, size := range []int{1 << 16, 3 << 20} {
		payload := make([]byte, size)
		payload[0] = byte(size)
		var resp []byte
		res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint("k", size), Payload: payload}, func(*oncekv.Tx) ([]byte, error) {
			resp = make([]byte, size)
			return resp, nil
		})
		require.NoError(t, err)
		weakPayload, weakResp, weakResult := weak.Make(&payload[0]), weak.Make(&resp[0]), weak.Make(&res.Response[0])
		payload, resp, res = nil, nil, oncekv.Result{}
		_, _, _ = payload, resp, res
		gone := func() bool {
			runtime.GC()
			return weakPayload.Value() == nil && weakResp.Value() == nil && weakResult.Value() == nil
		}
		require.Eventually(t, gone, 5*time.Second, 10*time.Millisecond,
			"the request's payload and response stay reachable after Apply returned")
	}
}

// TestNoBboltSliceOutlivesItsTransaction reads every byte slice the API
// hands out (an applied and a duplicate Result.Response, a done and a
// completed Claim.Result) after the transaction that produced it and after
// Close, when bbolt's mmap is gone: a slice into it would hold garbage or
// crash. The effect returns a slice of a bucket value on purpose, and the
// pages it pointed to are rewritten before the check.
func TestNoBboltSliceOutlivesItsTransaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slices.db")
	db, err := oncekv.Open(path, &oncekv.Options{ExpireInterval: -1})
	require.NoError(t, err)
	ctx := context.Background()
	want := []byte("response-from-a-bucket-value")
	fromBucket := func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("v"))
		if err != nil {
			return nil, err
		}
		if err := b.Put([]byte("r"), want); err != nil {
			return nil, err
		}
		return b.Get([]byte("r")), nil // bbolt-owned until the commit
	}
	req := oncekv.Request{Handler: "slices", Key: "a"}
	applied, err := db.Apply(ctx, req, fromBucket)
	require.NoError(t, err)
	dup, err := db.Apply(ctx, req, fromBucket)
	require.NoError(t, err)
	require.True(t, dup.Duplicate)

	c, err := db.Claim(ctx, oncekv.Request{Handler: "slices", Key: "claimed"}, time.Minute)
	require.NoError(t, err)
	completed, err := c.Complete(ctx, want, nil)
	require.NoError(t, err)
	again, err := db.Claim(ctx, oncekv.Request{Handler: "slices", Key: "claimed"}, time.Minute)
	require.NoError(t, err)
	require.True(t, again.Done())
	doneResult := again.Result()

	// Rewrite the pages those values lived on, then unmap the file.
	for i := range 200 {
		require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("v"))
			if err != nil {
				return err
			}
			return b.Put([]byte("r"), []byte(strings.Repeat("x", i%64)))
		}))
	}
	require.NoError(t, db.Close())
	for name, got := range map[string][]byte{
		"applied Result.Response":   applied.Response,
		"duplicate Result.Response": dup.Response,
		"Complete's Result":         completed.Response,
		"done Claim.Result":         doneResult.Response,
		"Claim.Result after Close":  again.Result().Response,
	} {
		require.Equal(t, want, got, name)
	}
}

// TestCallerSlicesMutatedUnderTheTransaction changes the caller's key,
// value, payload and response buffers after handing them over, inside the
// transaction (before the commit) and after the call: what is stored must
// be what was passed at the time of the call. bbolt keeps a Put's value by
// reference until the commit, so oncekv must copy it.
func TestCallerSlicesMutatedUnderTheTransaction(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	key, value := []byte("key"), []byte("value")
	payload, response := []byte("payload"), []byte("response")
	req := oncekv.Request{Handler: "mutate", Key: "k", Payload: payload}
	res, err := db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("m"))
		if err != nil {
			return nil, err
		}
		if err := b.Put(key, value); err != nil {
			return nil, err
		}
		copy(key, "KEY")
		copy(value, "VALUE")
		return response, nil
	})
	require.NoError(t, err)
	copy(response, "RESPONSE")
	copy(payload, "PAYLOAD")
	require.Equal(t, "response", string(res.Response), "Apply's result must not alias the effect's buffer")

	// The same request as first delivered is a duplicate with the response
	// as it was returned; the mutated payload is another payload.
	dup, err := db.Apply(ctx, oncekv.Request{Handler: "mutate", Key: "k", Payload: []byte("payload")}, nil)
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, "response", string(dup.Response))
	_, err = db.Apply(ctx, req, nil)
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	res.Response[0] = 'X' // the caller's to modify: the stored one stays
	dup, err = db.Apply(ctx, oncekv.Request{Handler: "mutate", Key: "k", Payload: []byte("payload")}, nil)
	require.NoError(t, err)
	require.Equal(t, "response", string(dup.Response))

	// Fenced and plain Puts inside Update, buffers reused before the commit.
	buf := []byte("fenced")
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("m"))
		if err := b.PutFenced([]byte("f"), buf, 1); err != nil {
			return err
		}
		copy(buf, "FENCED")
		return nil
	}))
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("m"))
		require.Equal(t, "value", string(b.Get([]byte("key"))))
		require.Nil(t, b.Get([]byte("KEY")))
		require.Equal(t, "fenced", string(b.Get([]byte("f"))))
		return nil
	}))
}
