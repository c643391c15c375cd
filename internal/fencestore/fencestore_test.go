package fencestore_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/fence"
	"github.com/oncekv/oncekv/internal/fencestore"
)

// openFences opens a bbolt file for the test and returns a function that
// runs fn on a fences bucket in a write transaction of it.
func openFences(t *testing.T) func(fn func(root *bolt.Bucket) error) error {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "f.db"), 0o600, &bolt.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return func(fn func(root *bolt.Bucket) error) error {
		return db.Update(func(tx *bolt.Tx) error {
			root, err := tx.CreateBucketIfNotExists([]byte("fences"))
			if err != nil {
				return err
			}
			return fn(root)
		})
	}
}

func TestNext(t *testing.T) {
	update := openFences(t)
	var got []uint64
	require.NoError(t, update(func(root *bolt.Bucket) error {
		for _, r := range []string{"a", "a", "b", "a"} {
			n, err := fencestore.Next(root, []byte(r))
			if err != nil {
				return err
			}
			got = append(got, n)
		}
		for range 2 {
			n, err := fencestore.NextClaim(root)
			if err != nil {
				return err
			}
			got = append(got, n)
		}
		_, err := fencestore.Next(root, nil)
		require.ErrorIs(t, err, fence.ErrResourceRequired)
		return nil
	}))
	require.Equal(t, []uint64{1, 2, 1, 3, 1, 2}, got, "per resource, and claims apart from every resource")

	// A rolled-back transaction issues nothing: the next commit reuses
	// the number, which nobody ever saw.
	errAbort := errors.New("abort")
	require.ErrorIs(t, update(func(root *bolt.Bucket) error {
		_, err := fencestore.Next(root, []byte("a"))
		require.NoError(t, err)
		return errAbort
	}), errAbort)
	require.NoError(t, update(func(root *bolt.Bucket) error {
		n, err := fencestore.Next(root, []byte("a"))
		require.Equal(t, uint64(4), n)
		return err
	}))
}

func TestNextExhausted(t *testing.T) {
	update := openFences(t)
	require.NoError(t, update(func(root *bolt.Bucket) error {
		// The counter of resource "r", at the largest token there is.
		full := reseal(binary.BigEndian.AppendUint64([]byte{1, 0x91, 0xcf}, math.MaxUint64)) // version 1, [uint64]
		require.NoError(t, root.Put([]byte("tr"), full))
		_, err := fencestore.Next(root, []byte("r"))
		require.ErrorIs(t, err, fence.ErrExhausted, "never wraps around to a token issued before")
		require.Equal(t, full, root.Get([]byte("tr")), "and changes nothing")

		// A key record where a counter belongs has the wrong length.
		rec, err := fencestore.Record{Fence: 1}.AppendBinary(nil)
		require.NoError(t, err)
		require.NoError(t, root.Put([]byte("tr"), rec))
		_, err = fencestore.Next(root, []byte("r"))
		var re *fencestore.RecordError
		require.ErrorAs(t, err, &re)
		require.Nil(t, re.Bucket)
		require.Equal(t, "tr", string(re.Key))
		require.ErrorContains(t, err, "record has 2 fields, want 1")
		return nil
	}))
}

func TestKeysFenced(t *testing.T) {
	update := openFences(t)
	require.NoError(t, update(func(root *bolt.Bucket) error {
		keys := fencestore.OpenKeys(root, []byte("b"))
		k := []byte("x")
		r, ok, err := keys.Get(k)
		require.NoError(t, err)
		require.False(t, ok)
		require.Zero(t, r)

		require.ErrorIs(t, keys.Fenced(k, 0), fence.ErrInvalidFence)
		require.NoError(t, keys.Fenced(k, 5))
		err = keys.Fenced(k, 5)
		require.Equal(t, &fence.Error{Stored: 5, Presented: 5}, err)
		require.ErrorIs(t, err, fence.ErrFenced)
		require.EqualError(t, err, "oncekv: fenced off by a newer writer: stored fence 5, presented 5")
		require.ErrorIs(t, keys.Fenced(k, 4), fence.ErrFenced)
		require.NoError(t, keys.Fenced(k, math.MaxUint64))
		require.ErrorIs(t, keys.Fenced(k, math.MaxUint64), fence.ErrFenced, "nothing is newer than the largest fence")

		r, ok, err = keys.Get(k)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, fencestore.Record{Fence: math.MaxUint64, Version: 2}, r)

		// Another user bucket's keys are apart.
		_, ok, err = fencestore.OpenKeys(root, []byte("b2")).Get(k)
		require.NoError(t, err)
		require.False(t, ok)
		return nil
	}))
}

func TestKeysVersions(t *testing.T) {
	update := openFences(t)
	require.NoError(t, update(func(root *bolt.Bucket) error {
		keys := fencestore.OpenKeys(root, []byte("b"))
		k := []byte("x")
		version := func() uint64 {
			r, _, err := keys.Get(k)
			require.NoError(t, err)
			return r.Version
		}
		require.NoError(t, keys.Touch(k), "no record: nothing to count")
		require.Zero(t, version())
		require.ErrorIs(t, keys.IfVersion(k, 0, true), fence.ErrUnversioned)
		require.Equal(t, &fence.VersionError{Stored: 0, Presented: 3}, keys.IfVersion(k, 3, false))
		require.NoError(t, keys.IfVersion(k, 0, false))
		require.Equal(t, uint64(1), version())
		require.NoError(t, keys.Touch(k))
		require.Equal(t, uint64(2), version())
		err := keys.IfVersion(k, 1, true)
		require.ErrorIs(t, err, fence.ErrVersionConflict)
		require.EqualError(t, err, "oncekv: version conflict: stored version 2, presented 1")
		require.NoError(t, keys.IfVersion(k, 2, true))
		require.NoError(t, keys.Fenced(k, 1))
		r, _, err := keys.Get(k)
		require.NoError(t, err)
		require.Equal(t, fencestore.Record{Fence: 1, Version: 4}, r)
		return nil
	}))
}

// TestKeysSeeRecordsOfThisTransaction: a Keys that found no records
// bucket still sees the one it creates itself.
func TestKeysSeeRecordsOfThisTransaction(t *testing.T) {
	update := openFences(t)
	require.NoError(t, update(func(root *bolt.Bucket) error {
		keys := fencestore.OpenKeys(root, []byte("b"))
		require.NoError(t, keys.Touch([]byte("x")))
		require.NoError(t, keys.IfVersion([]byte("y"), 0, false))
		require.NoError(t, keys.Touch([]byte("y")))
		r, ok, err := keys.Get([]byte("y"))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, uint64(2), r.Version)
		return nil
	}))
}

func TestRecordCorrupt(t *testing.T) {
	good, err := fencestore.Record{Fence: 7, Version: 3}.AppendBinary(nil)
	require.NoError(t, err)
	require.Len(t, good, 24, "version byte, array header, two 9-byte integers, checksum")
	var r fencestore.Record
	require.NoError(t, r.UnmarshalBinary(good))
	require.Equal(t, fencestore.Record{Fence: 7, Version: 3}, r)

	body := good[:len(good)-4]
	for _, tc := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"empty", nil, "shorter than its header"},
		{"short", good[:4], "shorter than its header"},
		{"flipped bit", flip(good, 9), "checksum mismatch"},
		{"truncated", good[:len(good)-1], "checksum mismatch"},
		{"future version", reseal(append([]byte{2}, body[1:]...)), "record version 2"},
		{"counter", reseal(append([]byte{1, 0x91}, body[2:11]...)), "record has 1 fields, want 2"},
		{"longer", reseal(append(append([]byte(nil), body...), 0)), "bytes after the record body"},
	} {
		require.ErrorContains(t, new(fencestore.Record).UnmarshalBinary(tc.raw), tc.want, tc.name)
	}

	update := openFences(t)
	require.NoError(t, update(func(root *bolt.Bucket) error {
		keys := fencestore.OpenKeys(root, []byte("b"))
		require.NoError(t, keys.Fenced([]byte("x"), 1))
		require.NoError(t, root.Bucket([]byte("kb")).Put([]byte("x"), flip(good, 3)))
		for name, err := range map[string]error{
			"Fenced":    keys.Fenced([]byte("x"), 9),
			"IfVersion": keys.IfVersion([]byte("x"), 1, true),
			"Touch":     keys.Touch([]byte("x")),
		} {
			var re *fencestore.RecordError
			require.ErrorAs(t, err, &re, name)
			require.Equal(t, "kb", string(re.Bucket))
			require.Equal(t, "x", string(re.Key))
		}
		return nil
	}))
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 1
	return c
}

// reseal gives body a valid checksum, so that what is tested is the check
// behind it.
func reseal(body []byte) []byte {
	b := append([]byte(nil), body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// FuzzRecord: no input makes the decoder panic, and whatever it accepts
// encodes back to the same bytes, so a record has one encoding.
func FuzzRecord(f *testing.F) {
	good, _ := fencestore.Record{Fence: 7, Version: 3}.AppendBinary(nil)
	f.Add(good)
	f.Add(flip(good, 23))
	f.Add([]byte{})
	f.Add(reseal([]byte{1, 0x92, 0, 0}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var r fencestore.Record
		if r.UnmarshalBinary(raw) != nil {
			return
		}
		again, err := r.AppendBinary(nil)
		require.NoError(t, err)
		require.Equal(t, raw, again)
	})
}
