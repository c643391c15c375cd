package oncekv_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// TestCheckNamesEveryDamagedRecord damages three system records of a
// closed store (a mark, a sealed window's filter, a fence counter) and
// expects Check, on the store opened read-only, to report each by bucket
// and key and to go on past each one.
func TestCheckNamesEveryDamagedRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "check.db")
	clock := oncetest.NewClock(claimEpoch)
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now})
	require.NoError(t, err)
	applyOp(t, db, "pay", "a", "ok")
	clock.Advance(time.Hour) // the first window is sealed: its filter is stored
	applyOp(t, db, "pay", "b", "ok")
	_, err = db.NextFence("printer")
	require.NoError(t, err)
	require.NoError(t, db.Check(func(p error) error { return fmt.Errorf("a sound store has a problem: %w", p) }))
	require.NoError(t, db.Close())

	flip := func(b *bolt.Bucket, key []byte) {
		v := append([]byte(nil), b.Get(key)...)
		require.NotEmpty(t, v, "%q", key)
		v[len(v)/2] ^= 0x10
		require.NoError(t, b.Put(key, v))
	}
	raw, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, raw.Update(func(tx *bolt.Tx) error {
		first := true
		require.NoError(t, tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			switch {
			case strings.HasPrefix(string(name), "oncekv.window/") && first:
				first = false
				flip(b, append([]byte{0, 3}, "paya"...))
			case string(name) == "oncekv.filters":
				k, _ := b.Cursor().First()
				flip(b, k)
			case string(name) == "oncekv.fences":
				flip(b, []byte("tprinter"))
			}
			return nil
		}))
		return nil
	}))
	require.NoError(t, raw.Close())

	ro, err := oncekv.Open(path, &oncekv.Options{ReadOnly: true, Now: clock.Now})
	require.NoError(t, err)
	defer ro.Close()
	var got []string
	require.NoError(t, ro.Check(func(p error) error {
		require.ErrorIs(t, p, oncekv.ErrCorrupt)
		var re *oncekv.RecordError
		require.ErrorAs(t, p, &re)
		got = append(got, re.Bucket+" "+re.Key)
		return nil
	}))
	window := "oncekv.window/" + claimEpoch.UTC().Truncate(time.Hour).Format(time.RFC3339)
	require.Equal(t, []string{
		window + " pay/a",
		"oncekv.filters " + claimEpoch.UTC().Truncate(time.Hour).Format(time.RFC3339),
		"oncekv.fences tprinter",
	}, got)
	stop := errors.New("stop")
	require.ErrorIs(t, ro.Check(func(error) error { return stop }), stop)
}
