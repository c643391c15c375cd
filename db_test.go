package oncekv_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

func TestOpenOptionsValidation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	_, err := oncekv.Open(path, &oncekv.Options{
		OpenTimeout:  -time.Second,
		FileMode:     os.ModeDir | 0o600,
		WindowSpan:   time.Hour,
		Retention:    time.Minute,
		MaxGroupSize: -1,
	})
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	require.ErrorIs(t, err, oncekv.ErrInvalidWindow)
	for _, field := range []string{"OpenTimeout", "FileMode", "MaxGroupSize", "Retention"} {
		require.Contains(t, err.Error(), field, "every bad field is reported at once")
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		require.Equal(t, 1, strings.Count(line, "oncekv: "), "the prefix once per problem: %q", line)
	}
	require.NoFileExists(t, path, "invalid options must not create the file")

	_, err = oncekv.Open("", nil)
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)

	opts := &oncekv.Options{NoSync: true}
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Equal(t, &oncekv.Options{NoSync: true}, opts, "Open must not modify the caller's options")
}

func TestOpenSecondTimeFailsAfterTimeoutNamingPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	defer db.Close()

	start := time.Now()
	_, err = oncekv.Open(path, &oncekv.Options{OpenTimeout: 200 * time.Millisecond})
	elapsed := time.Since(start)
	require.ErrorIs(t, err, oncekv.ErrLocked)
	require.Contains(t, err.Error(), path)
	require.Less(t, elapsed, 10*time.Second)
	// The message says how long Open really waited, which bbolt may cut a
	// poll short of the timeout, and names the timeout apart.
	require.Contains(t, err.Error(), "(OpenTimeout 200ms)")
	_, rest, ok := strings.Cut(err.Error(), "gave up after ")
	require.True(t, ok, err.Error())
	waited, perr := time.ParseDuration(strings.Fields(rest)[0])
	require.NoError(t, perr)
	require.LessOrEqual(t, waited, elapsed.Round(time.Millisecond)+time.Millisecond)

	// The default is finite too.
	_, err = oncekv.Open(path, nil)
	require.ErrorIs(t, err, oncekv.ErrLocked)
}

func TestOpenRejectsForeignFiles(t *testing.T) {
	dir := t.TempDir()

	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte("hello, this is not a database\n"), 0o600))
	_, err := oncekv.Open(text, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), text)

	random := filepath.Join(dir, "random.db")
	junk := make([]byte, 64<<10)
	for i := range junk {
		junk[i] = byte(i*7 + i/251)
	}
	require.NoError(t, os.WriteFile(random, junk, 0o600))
	_, err = oncekv.Open(random, nil)
	require.ErrorIs(t, err, oncekv.ErrNotOncekv)

	// A valid bbolt file of another program: not ours, and left untouched.
	other := filepath.Join(dir, "other.db")
	b, err := bolt.Open(other, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucket([]byte("widgets"))
		if err != nil {
			return err
		}
		return bk.Put([]byte("w1"), []byte("blue"))
	}))
	require.NoError(t, b.Close())
	before, err := os.ReadFile(other)
	require.NoError(t, err)
	_, err = oncekv.Open(other, nil)
	require.ErrorIs(t, err, oncekv.ErrNotOncekv)
	require.Contains(t, err.Error(), "widgets")
	after, err := os.ReadFile(other)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

func TestUseAfterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "closed.db")
	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, db.Close(), "closing twice is harmless")

	ctx := context.Background()
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.ErrorIs(t, err, oncekv.ErrClosed)
	_, err = db.ApplyBatch(ctx, []oncekv.Request{{Handler: "h", Key: "k"}}, nil)
	require.ErrorIs(t, err, oncekv.ErrClosed)
	require.ErrorIs(t, db.Update(func(*oncekv.Tx) error { return nil }), oncekv.ErrClosed)
	require.ErrorIs(t, db.View(func(*oncekv.Tx) error { return nil }), oncekv.ErrClosed)
}

func TestCloseWaitsForCallsInFlight(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "wait.db"), &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	inEffect := make(chan struct{})
	release := make(chan struct{})
	applied := make(chan error, 1)
	go func() {
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, func(tx *oncekv.Tx) ([]byte, error) {
			close(inEffect)
			<-release
			return deposit("z", 1)(tx)
		})
		applied <- err
	}()
	<-inEffect
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while an Apply was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-applied)
	require.NoError(t, <-closed)
}

func TestUserBucketsCannotReachSystemBuckets(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k"}, func(*oncekv.Tx) ([]byte, error) { return []byte("r"), nil })
	require.NoError(t, err)

	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		for _, name := range []string{"oncekv.meta", "oncekv.fences", "u/", "u/u/"} {
			require.Nil(t, tx.Bucket([]byte(name)), name)
		}
		// A user bucket may carry a system name; it is still a user bucket.
		for _, name := range []string{"oncekv.meta", "oncekv.fences", "oncekv.window/"} {
			b, err := tx.CreateBucketIfNotExists([]byte(name))
			require.NoError(t, err)
			require.NoError(t, b.Put([]byte("k"), []byte("clobber?")))
			require.NoError(t, tx.DeleteBucket([]byte(name)))
		}
		var names []string
		require.NoError(t, tx.ForEachBucket(func(name []byte) error {
			names = append(names, string(name))
			return nil
		}))
		require.Empty(t, names)
		return nil
	}))
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate, "user calls must not have touched the marks")
	require.Equal(t, "r", string(res.Response))
}

func TestUserBucketOperations(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	var leaked *oncekv.Bucket
	var leakedTx *oncekv.Tx
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		require.True(t, tx.Writable())
		_, err := tx.CreateBucketIfNotExists(nil)
		require.ErrorIs(t, err, oncekv.ErrBucketNameRequired)
		b, err := tx.CreateBucketIfNotExists([]byte("kv"))
		require.NoError(t, err)
		require.Equal(t, "kv", string(b.Name()))

		key, val := []byte("b"), []byte("2")
		require.NoError(t, b.Put(key, val))
		key[0], val[0] = 'X', 'X' // caller-owned slices may be reused at once
		require.Equal(t, "2", string(b.Get([]byte("b"))))
		require.Nil(t, b.Get([]byte("X")))
		require.NoError(t, b.Put([]byte("a"), []byte("1")))
		require.NoError(t, b.Put([]byte("c"), nil))
		require.NotNil(t, b.Get([]byte("c")), "a key with an empty value exists")

		require.ErrorIs(t, b.Put(nil, []byte("v")), oncekv.ErrKeyRequired)
		require.ErrorIs(t, b.Put(make([]byte, 32769), []byte("v")), oncekv.ErrKeyTooLarge)
		require.NoError(t, b.Put(make([]byte, 32768), []byte("max")))
		require.NoError(t, b.Delete(make([]byte, 32768)))
		require.NoError(t, b.Delete([]byte("absent")))

		var seen []string
		require.NoError(t, b.ForEach(func(k, v []byte) error {
			seen = append(seen, string(k)+"="+string(v))
			return nil
		}))
		require.Equal(t, []string{"a=1", "b=2", "c="}, seen)

		c := b.Cursor()
		k, _ := c.Last()
		require.Equal(t, "c", string(k))
		k, _ = c.Prev()
		require.Equal(t, "b", string(k))
		k, _ = c.Seek([]byte("bb"))
		require.Equal(t, "c", string(k))
		require.NoError(t, c.Delete())
		k, _ = c.First()
		require.Equal(t, "a", string(k))
		k, _ = c.Next()
		require.Equal(t, "b", string(k))
		k, _ = c.Next()
		require.Nil(t, k)

		seq, err := b.NextSequence()
		require.NoError(t, err)
		require.Equal(t, uint64(1), seq)
		leaked, leakedTx = b, tx
		return nil
	}))

	// Everything obtained from a transaction is dead once it ends.
	require.Nil(t, leaked.Get([]byte("a")))
	require.ErrorIs(t, leaked.Put([]byte("a"), []byte("v")), oncekv.ErrTxClosed)
	require.ErrorIs(t, leaked.ForEach(func(k, v []byte) error { return nil }), oncekv.ErrTxClosed)
	k, _ := leaked.Cursor().First()
	require.Nil(t, k)
	require.Nil(t, leakedTx.Bucket([]byte("kv")))
	_, err := leakedTx.CreateBucketIfNotExists([]byte("late"))
	require.ErrorIs(t, err, oncekv.ErrTxClosed)

	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.False(t, tx.Writable())
		b := tx.Bucket([]byte("kv"))
		require.NotNil(t, b)
		require.Equal(t, "1", string(b.Get([]byte("a"))))
		require.ErrorIs(t, b.Put([]byte("a"), []byte("v")), oncekv.ErrTxNotWritable)
		require.ErrorIs(t, b.Delete([]byte("a")), oncekv.ErrTxNotWritable)
		_, err := tx.CreateBucketIfNotExists([]byte("new"))
		require.ErrorIs(t, err, oncekv.ErrTxNotWritable)
		require.Nil(t, tx.Bucket([]byte("missing")))
		return nil
	}))

	errStop := errors.New("stop")
	require.ErrorIs(t, db.Update(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("kv"))
		require.NoError(t, b.Put([]byte("a"), []byte("rolled back")))
		return errStop
	}), errStop)
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.Equal(t, "1", string(tx.Bucket([]byte("kv")).Get([]byte("a"))))
		return nil
	}))
}

// Done is open while the store is and closed once Close begins, for code
// that waits between calls on the store.
func TestDoneIsClosedByClose(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "done.db"), nil)
	require.NoError(t, err)
	select {
	case <-db.Done():
		require.FailNow(t, "Done is closed on an open store")
	default:
	}
	require.NoError(t, db.Close())
	select {
	case <-db.Done():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Done is not closed after Close")
	}
	require.NoError(t, db.Close(), "a second Close must not close Done twice")
}
