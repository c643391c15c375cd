package oncekv_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

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
