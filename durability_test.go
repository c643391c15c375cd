package oncekv_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// TestOpenSyncsParentDirectory watches, with strace, a child create a new
// store: the file's directory must be fsynced after the file was created,
// or a power loss can lose the whole file (the directory entry); a reopen
// of an existing file needs no such fsync.
func TestOpenSyncsParentDirectory(t *testing.T) {
	strace := needStrace(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "new.db")
	trace := filepath.Join(t.TempDir(), "trace")
	syncsOfDir := func() int {
		run := runWorkloadChild(t, path, "1:1:0:1:0", "",
			strace, "-f", "-qq", "-y", "-o", trace, "-e", "trace=openat,fsync")
		require.NoError(t, run.err, run.stderr)
		raw, err := os.ReadFile(trace)
		require.NoError(t, err)
		created, n := false, 0
		for line := range strings.SplitSeq(string(raw), "\n") {
			switch {
			case strings.Contains(line, "openat(") && strings.Contains(line, path) && strings.Contains(line, "O_CREAT"):
				created = true
			case strings.Contains(line, "fsync(") && strings.Contains(line, "<"+dir+">"):
				require.True(t, created, "the directory was synced before the file was created:\n%s", raw)
				n++
			}
		}
		return n
	}
	require.Equal(t, 1, syncsOfDir(), "creating a store syncs its directory once")
	require.Zero(t, syncsOfDir(), "reopening an existing store needs no directory sync")
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
