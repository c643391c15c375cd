package fencestore_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/oncekv/oncekv/internal/fencestore"
)

// TestRecordReadsOldBytes: key records written before the record codec was
// written by hand (these bytes were printed by that code) decode to the
// same fences and versions, and are written back byte for byte, so a file
// written by either build works with the other.
func TestRecordReadsOldBytes(t *testing.T) {
	for _, tc := range []struct {
		old  string
		want fencestore.Record
	}{
		{"0192cf0000000000000005cf00000000000000071527d2d1", fencestore.Record{Fence: 5, Version: 7}},
		{"0192cfffffffffffffffffcf0000010000000000c820a564", fencestore.Record{Fence: math.MaxUint64, Version: 1 << 40}},
	} {
		raw, err := hex.DecodeString(tc.old)
		require.NoError(t, err)
		var r fencestore.Record
		require.NoError(t, r.UnmarshalBinary(raw))
		require.Equal(t, tc.want, r)
		again, err := r.AppendBinary(nil)
		require.NoError(t, err)
		require.Equal(t, raw, again)
		after, err := r.AppendBinary([]byte("prefix"))
		require.NoError(t, err)
		require.Equal(t, append([]byte("prefix"), raw...), after, "appends, with the checksum over the record alone")
	}
}

// msgpackRecord is the reference codec: a key record as the msgpack
// encoder writes it (version byte, array of two full-width integers,
// CRC-32C of both), and the strict decoding of it.
func msgpackRecord(r fencestore.Record) []byte {
	var buf bytes.Buffer
	buf.WriteByte(1)
	enc := msgpack.NewEncoder(&buf)
	_ = enc.EncodeArrayLen(2)
	_ = enc.EncodeUint64(r.Fence)
	_ = enc.EncodeUint64(r.Version)
	return reseal(buf.Bytes())
}

// FuzzRecordMatchesMsgpack: the hand-written codec accepts a record
// exactly when the msgpack encoder could have written it, and reads the
// same numbers from it; no input panics.
func FuzzRecordMatchesMsgpack(f *testing.F) {
	f.Add(msgpackRecord(fencestore.Record{Fence: 7, Version: 3}))
	f.Add(msgpackRecord(fencestore.Record{Fence: math.MaxUint64}))
	f.Add(reseal([]byte{1, 0x92, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1, 0x01}))
	f.Add(reseal([]byte{1, 0xdc, 0, 2, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1}))
	f.Add([]byte{1, 0x92})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var r fencestore.Record
		if err := r.UnmarshalBinary(raw); err != nil {
			// Anything refused is not what the encoder writes for any
			// record, unless it is that record's bytes with a bad checksum
			// or version, which the reference refuses too.
			if len(raw) == 24 && crc32.Checksum(raw[:20], crc32.MakeTable(crc32.Castagnoli)) == binary.LittleEndian.Uint32(raw[20:]) {
				var ref fencestore.Record
				ref.Fence, ref.Version = binary.BigEndian.Uint64(raw[3:11]), binary.BigEndian.Uint64(raw[12:20])
				require.NotEqual(t, msgpackRecord(ref), raw, "refused bytes the encoder writes")
			}
			return
		}
		require.Equal(t, msgpackRecord(r), raw, "accepted bytes the encoder does not write, or read other numbers")
	})
}
