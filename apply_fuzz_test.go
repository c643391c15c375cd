package oncekv_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/bucket"
	"github.com/oncekv/oncekv/internal/layout"
)

// Response modes of FuzzAPI's effect.
const (
	respNil = iota
	respEmpty
	respPayload
	respModes
)

func fuzzResponse(mode uint8, payload []byte) []byte {
	switch mode % respModes {
	case respNil:
		return nil
	case respEmpty:
		return []byte{}
	}
	return bytes.Clone(payload)
}

// fuzzKeySizes are the key lengths around bbolt's limit of 32768 bytes,
// and far past it. FuzzAPI grows a key to one of them when its grow input
// says so: huge inputs in the corpus would slow the fuzzer to a crawl.
var fuzzKeySizes = []int{layout.MaxMarkKeySize - 1, layout.MaxMarkKeySize, 32767, 32768, 32769, 1 << 20}

// growKey pads key with 'k' to n bytes.
func growKey(key string, n int) string {
	if len(key) >= n {
		return key[:n]
	}
	return key + strings.Repeat("k", n-len(key))
}

// fuzzSeen is what FuzzAPI expects of a (handler, key) it applied before.
type fuzzSeen struct {
	hash [32]byte
	resp []byte
}

// FuzzAPI drives Apply, a fenced write and the reads back from bytes, on
// one store shared by every input, so that later inputs meet the keys of
// earlier ones: duplicates and key reuse. Whatever the input (empty, huge
// or invalid UTF-8 keys, nil or empty payloads and responses, fence 0 or
// the greatest fence), the store answers with a typed error or the right
// result, never a panic:
//
//   - a mark key (handler and key) is refused iff it is empty or longer than
//     layout.MaxMarkKeySize, with ErrHandlerRequired, ErrKeyRequired or
//     ErrKeyTooLarge;
//   - the first delivery runs the effect, later ones return the first
//     response byte for byte, nil and empty kept apart; a different payload
//     is ErrKeyReuse (a nil and an empty payload are the same bytes);
//   - PutFenced takes fence 0 as ErrInvalidFence, a fence not above the
//     stored one as ErrFenced, and otherwise stores value and fence, which
//     read back exactly; a user key is refused iff it is empty or over
//     bbolt's key limit.
func FuzzAPI(f *testing.F) {
	f.Add("h", "k", []byte("p"), uint8(respPayload), uint64(1), uint8(0))
	f.Add("h", "k", []byte("other"), uint8(respPayload), uint64(1), uint8(0))
	f.Add("h", "", []byte(nil), uint8(respNil), uint64(0), uint8(0))
	f.Add("", "k", []byte{}, uint8(respEmpty), uint64(math.MaxUint64), uint8(0))
	f.Add("h", "nil-vs-empty", []byte(nil), uint8(respNil), uint64(2), uint8(0))
	f.Add("h", "nil-vs-empty", []byte{}, uint8(respEmpty), uint64(2), uint8(0))
	f.Add("\xff\xfe", "\xc3\x28\x00", []byte{0xff}, uint8(respEmpty), uint64(math.MaxUint64-1), uint8(0))
	for grow := range uint8(len(fuzzKeySizes)) {
		f.Add("h", "k", []byte("x"), uint8(respPayload), uint64(math.MaxUint64), grow+1)
		f.Add("h", "", []byte("x"), uint8(respNil), uint64(3), grow+1)
	}

	db, err := oncekv.Open(filepath.Join(f.TempDir(), "fuzz.db"), &oncekv.Options{NoSync: true, ExpireInterval: -1})
	require.NoError(f, err)
	f.Cleanup(func() { require.NoError(f, db.Close()) })
	seen := map[[2]string]fuzzSeen{}
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, handler, key string, payload []byte, mode uint8, fence uint64, grow uint8) {
		if grow > 0 {
			key = growKey(key, fuzzKeySizes[int(grow-1)%len(fuzzKeySizes)])
		}
		want := fuzzResponse(mode, payload)
		ran := false
		res, err := db.Apply(ctx, oncekv.Request{Handler: handler, Key: key, Payload: payload},
			func(*oncekv.Tx) ([]byte, error) { ran = true; return want, nil })
		id := [2]string{handler, key}
		prev, dup := seen[id]
		switch {
		case handler == "":
			require.ErrorIs(t, err, oncekv.ErrHandlerRequired)
		case key == "":
			require.ErrorIs(t, err, oncekv.ErrKeyRequired)
		case len(handler)+len(key) > layout.MaxMarkKeySize:
			require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
		case dup && prev.hash != sha256.Sum256(payload):
			require.ErrorIs(t, err, oncekv.ErrKeyReuse)
		case dup:
			require.NoError(t, err)
			require.False(t, ran)
			require.True(t, res.Duplicate)
			require.Equal(t, prev.resp, res.Response)
			require.Equal(t, prev.resp == nil, res.Response == nil, "nil and empty responses stay distinct")
		default:
			require.NoError(t, err)
			require.True(t, ran)
			require.False(t, res.Duplicate)
			require.Equal(t, want == nil, res.Response == nil, "nil and empty responses stay distinct")
			require.Equal(t, want, res.Response)
			seen[id] = fuzzSeen{hash: sha256.Sum256(payload), resp: bytes.Clone(want)}
		}
		var reqErr *oncekv.RequestError
		if err != nil {
			require.ErrorAs(t, err, &reqErr, "errors name the request")
		}

		// The key as a user key, written with a fence.
		var stored uint64
		err = db.Update(func(tx *oncekv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("fuzz"))
			if err != nil {
				return err
			}
			stored = b.Fence([]byte(key))
			return b.PutFenced([]byte(key), payload, fence)
		})
		switch {
		case key == "":
			require.ErrorIs(t, err, oncekv.ErrKeyRequired)
			return
		case len(key) > bucket.MaxKeySize:
			require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
			return
		case fence == 0:
			require.ErrorIs(t, err, oncekv.ErrInvalidFence)
			return
		case fence <= stored:
			var fe *oncekv.FenceError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, stored, fe.Stored)
			require.Equal(t, fence, fe.Presented)
			return
		}
		if errors.Is(err, oncekv.ErrKeyTooLarge) {
			// The fence record's key carries the bucket name too, so the
			// longest user keys fit bbolt but not a fence: refused whole.
			require.Greater(t, len(key), bucket.MaxKeySize-64)
			return
		}
		require.NoError(t, err)
		require.NoError(t, db.View(func(tx *oncekv.Tx) error {
			b := tx.Bucket([]byte("fuzz"))
			got := b.Get([]byte(key))
			require.NotNil(t, got, "a stored key reads back, even with an empty value")
			require.Equal(t, string(payload), string(got))
			require.Equal(t, fence, b.Fence([]byte(key)))
			return nil
		}))
	})
}
