package jcs_test

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/jcs"
	"github.com/oncekv/oncekv/retry"
)

// TestFingerprintIsSHA256OfCanonical: a fingerprint is the SHA-256 of the
// canonical form and nothing else, FingerprintSize bytes, which a
// Request.Fingerprint may hold.
func TestFingerprintIsSHA256OfCanonical(t *testing.T) {
	require.LessOrEqual(t, jcs.FingerprintSize, oncekv.MaxFingerprintSize)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	sp := speller{rng: rng, space: " \n"}
	for range 500 {
		v := randomValue(rng, 3)
		fp, err := jcs.Fingerprint([]byte(sp.spell(v)))
		require.NoError(t, err, "seed %d", seed)
		sum := sha256.Sum256([]byte(canonical(v)))
		require.Equal(t, sum[:], fp, "seed %d", seed)
		require.Len(t, fp, jcs.FingerprintSize)
	}
}

// TestRequestDeduplicatesSpellings: through a real store, deliveries of a
// key whose bodies are spellings of one value are duplicates, before and
// after the store is reopened, and a body with another value, however
// small the change (a type, an element's place, a member more), is
// ErrKeyReuse; the Payload handed over is the body as it came.
func TestRequestDeduplicatesSpellings(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jcs.db")
	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()

	first := `{"id":7,"tags":["a","b"],"price":1.5,"note":"caf\u00e9"}`
	runs := 0
	apply := func(db *oncekv.DB, body string) (oncekv.Result, error) {
		t.Helper()
		req, err := jcs.Request("orders", "k-1", []byte(body))
		require.NoError(t, err, body)
		require.Equal(t, body, string(req.Payload))
		require.Equal(t, "orders", req.Handler)
		require.Equal(t, "k-1", req.Key)
		return db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) {
			runs++
			return []byte("done"), nil
		})
	}
	res, err := apply(db, first)
	require.NoError(t, err)
	require.False(t, res.Duplicate)

	same := []string{
		`{ "note" : "café", "price" : 1.50, "tags" : [ "a", "b" ], "id" : 7.0 }`,
		`{"tags":["\u0061","b"],"id":7e0,"note":"caf\u00E9","price":15e-1}`,
	}
	changed := []string{
		`{"id":"7","tags":["a","b"],"price":1.5,"note":"café"}`,          // 7 as a string
		`{"id":7,"tags":["b","a"],"price":1.5,"note":"café"}`,            // array order
		`{"id":7,"tags":["a","b"],"price":1.5,"note":"café","x":null}`,   // a member more
		`{"id":7,"tags":["a","b"],"price":1.5,"note":"cafe\u0301"}`,      // é decomposed
		`{"id":7,"tags":["a","b"],"price":1.5000001,"note":"café"}`,      // another number
		`{"id":7,"tags":["a","b"],"price":1.5,"note":"café","ID":7}`,     // names are case-sensitive
		`[{"id":7,"tags":["a","b"],"price":1.5,"note":"café"}]`,          // wrapped
		`{"id":7,"tags":["a","b"],"price":true,"note":"café"}`,           // another type
		`{"id":7,"tags":["a","b"],"price":1.5,"note":"caf\u00e9\u0000"}`, // a NUL more
	}
	check := func(db *oncekv.DB) {
		t.Helper()
		for _, body := range same {
			res, err := apply(db, body)
			require.NoError(t, err, body)
			require.True(t, res.Duplicate, body)
			require.Equal(t, "done", string(res.Response))
		}
		for _, body := range changed {
			_, err := apply(db, body)
			require.ErrorIs(t, err, oncekv.ErrKeyReuse, body)
		}
	}
	check(db)
	require.NoError(t, db.Close())
	db, err = oncekv.Open(path, nil)
	require.NoError(t, err)
	check(db)
	require.Equal(t, 1, runs, "the effect ran once")
}

// TestRequestRefusesWhatHasNoCanonicalForm: a body that is not I-JSON
// gets Canonicalize's error and no Request, an error oncekv.Classify and
// package retry take as permanent.
func TestRequestRefusesWhatHasNoCanonicalForm(t *testing.T) {
	for body, want := range map[string]error{
		`{"a":1,"a":1}`: jcs.ErrDuplicateName,
		`not json`:      jcs.ErrSyntax,
		`[1e999]`:       jcs.ErrNumberRange,
		`"\udfff"`:      jcs.ErrLoneSurrogate,
	} {
		req, err := jcs.Request("h", "k", []byte(body))
		require.ErrorIs(t, err, want, body)
		require.Equal(t, oncekv.Request{}, req, body)
		require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action, "a bad message is dead-lettered, not redelivered: %s", body)
		require.True(t, retry.IsPermanent(err), body)
	}
}
