package oncekv_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
)

// corruptMarks rewrites every mark in the closed file at path with fn.
func corruptMarks(t *testing.T, path string, fn func(v []byte) []byte) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		return layout.ForEachWindow(tx, false, func(_ int64, w *bolt.Bucket) error {
			type kv struct{ k, v []byte }
			var all []kv
			require.NoError(t, w.ForEach(func(k, v []byte) error {
				all = append(all, kv{append([]byte(nil), k...), fn(append([]byte(nil), v...))})
				return nil
			}))
			for _, e := range all {
				require.NoError(t, w.Put(e.k, e.v))
			}
			return nil
		})
	}))
}

func TestCorruptMarkIsAnErrorNamingBucketAndKey(t *testing.T) {
	cases := map[string]func([]byte) []byte{
		"flipped byte":  func(v []byte) []byte { v[len(v)/2] ^= 0x40; return v },
		"truncated":     func(v []byte) []byte { return v[:len(v)-5] },
		"empty":         func([]byte) []byte { return []byte{} },
		"future format": func(v []byte) []byte { v[0] = 99; return v },
		"format 2 mark, flipped byte": func(v []byte) []byte {
			var m layout.Mark
			if m.Unmarshal(v) != nil {
				panic("the pristine mark does not decode")
			}
			old := m.MarshalLegacy()
			old[len(old)/2] ^= 0x40
			return old
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.db")
			ctx := context.Background()
			db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
			require.NoError(t, err)
			req := oncekv.Request{Handler: "pay", Key: "order-42", Payload: []byte("x")}
			_, err = db.Apply(ctx, req, deposit("acct", 5))
			require.NoError(t, err)
			require.NoError(t, db.Close())

			corruptMarks(t, path, corrupt)

			db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) {
				t.Fatal("the effect ran again because a corrupt mark read as absent")
				return nil, nil
			})
			require.ErrorIs(t, err, oncekv.ErrCorrupt)
			var re *oncekv.RecordError
			require.ErrorAs(t, err, &re)
			require.Contains(t, re.Bucket, "oncekv.window/")
			require.Equal(t, "pay/order-42", re.Key)
			require.Equal(t, uint64(5), balance(t, db, "acct"))
		})
	}
}
