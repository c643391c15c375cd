package oncekvtest_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/oncekvtest"
)

// Buckets shows every user bucket's keys and values readably, with their
// fences, and only the buckets keep accepts.
func TestBucketsShowsTheUserBuckets(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "s.db"), &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Apply(t.Context(), oncekv.Request{Handler: "h", Key: "k"}, nil) // a mark: not a user bucket
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("accounts"))
		require.NoError(t, err)
		require.NoError(t, b.Put([]byte("alice"), binary.BigEndian.AppendUint64(nil, 300)))
		require.NoError(t, b.Put([]byte("a/b c"), []byte("text\nline")))
		require.NoError(t, b.Put([]byte{0xff, 0x01}, []byte{0x00, 0x7f, 0x80}))
		require.NoError(t, b.PutFenced([]byte("fenced"), []byte("v"), 7))
		o, err := tx.CreateBucketIfNotExists([]byte("other"))
		require.NoError(t, err)
		return o.Put([]byte("x"), []byte("y"))
	}))
	st, err := oncekvtest.Buckets(db, nil)
	require.NoError(t, err)
	require.Equal(t, oncekvtest.State{
		"accounts/alice":   "0x000000000000012c (uint64 300)",
		`accounts/"a/b c"`: `"text\nline"`,
		"accounts/0xff01":  "0x007f80",
		"accounts/fenced":  `"v" fence=7`,
		"other/x":          `"y"`,
	}, st)
	only, err := oncekvtest.Buckets(db, func(b string) bool { return b == "other" })
	require.NoError(t, err)
	require.Equal(t, oncekvtest.State{"other/x": `"y"`}, only)
}

// Files shows every regular file under a directory, by its relative path;
// a directory that is not there is an empty state.
func TestFilesShowsTheFilesUnderADirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "logs"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "logs", "audit.log"), []byte("a\nb\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "blob"), []byte{1, 2, 3}, 0o600))
	st, err := oncekvtest.Files(dir)
	require.NoError(t, err)
	require.Equal(t, oncekvtest.State{"file:logs/audit.log": `"a\nb\n"`, "file:blob": "0x010203"}, st)
	st, err = oncekvtest.Files(filepath.Join(dir, "missing"))
	require.NoError(t, err)
	require.Empty(t, st)
}

// A difference shows the reference's value, then the run's, and long
// values are clipped.
func TestLongValuesAreClippedInTheDiff(t *testing.T) {
	s := depositSpec()
	s.Request = func(d deposit) oncekv.Request {
		r := requestOf(d)
		r.Key = newUUID()
		return r
	}
	s.Effect = func(tx *oncekv.Tx, d deposit) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("log"))
		if err != nil {
			return nil, err
		}
		n, err := b.NextSequence()
		if err != nil {
			return nil, err
		}
		return nil, b.Put([]byte("entries"), []byte(strings.Repeat("x", int(n)*500)))
	}
	out := expectFailure(t, func(tb testing.TB) { oncekvtest.Check(tb, planted(s)) })
	require.Contains(t, out, "~ log/entries: reference \""+strings.Repeat("x", 159)+"...(502 bytes)")
}
