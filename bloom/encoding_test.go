package bloom_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/bloom"
)

// Offsets of the version-1 encoding, restated here because the format is a
// contract with files already on disk: a change that moves them must fail
// these tests.
const (
	offVersion  = 4
	offHashAlg  = 5
	offFlags    = 6
	offFPRate   = 8
	offPlanned  = 16
	offStages   = 24
	offReserved = 28
	headerSize  = 32
	descSize    = 32
	// Within a stage descriptor.
	offCapacity = 0
	offCount    = 8
	offBlocks   = 16
	offK        = 24
	offDescRsv  = 28
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// reseal rewrites the trailing checksum so a deliberately edited encoding
// reaches the field checks instead of failing on its checksum.
func reseal(b []byte) []byte {
	n := len(b) - 4
	binary.LittleEndian.PutUint32(b[n:], crc32.Checksum(b[:n], castagnoli))
	return b
}

// grownFilter returns a small filter with three stages, some keys in each.
func grownFilter(t testing.TB) (*bloom.Filter, []uint64) {
	f, err := bloom.New(8, 0.01)
	require.NoError(t, err)
	var added []uint64
	for i := range uint64(40) { // 8 + 16 fill stages 0 and 1
		h := keyHash("enc", i)
		f.Add(h)
		added = append(added, h)
	}
	require.Equal(t, 3, f.Stages())
	return f, added
}

func encode(t testing.TB, f *bloom.Filter) []byte {
	b, err := f.MarshalBinary()
	require.NoError(t, err)
	require.Len(t, b, f.EncodedSize())
	return b
}

func TestRoundTrip(t *testing.T) {
	f, added := grownFilter(t)
	enc := encode(t, f)

	g, err := bloom.Decode(enc)
	require.NoError(t, err)
	require.Equal(t, f.Count(), g.Count())
	require.Equal(t, f.Stages(), g.Stages())
	require.Equal(t, f.SizeBytes(), g.SizeBytes())
	gk, gr := g.Params()
	fk, fr := f.Params()
	require.Equal(t, fk, gk)
	require.Equal(t, fr, gr)
	for _, h := range added {
		require.True(t, g.MayContain(h))
	}
	require.Equal(t, enc, encode(t, g), "re-encoding must be byte-identical")

	// A decoded filter keeps growing where the original left off.
	for i := uint64(40); i < 200; i++ {
		h := keyHash("enc", i)
		g.Add(h)
		added = append(added, h)
	}
	for _, h := range added {
		require.True(t, g.MayContain(h))
	}

	// UnmarshalBinary works on the zero value, and AppendBinary appends.
	var z bloom.Filter
	require.NoError(t, z.UnmarshalBinary(enc))
	require.Equal(t, f.Count(), z.Count())
	prefixed, err := f.AppendBinary([]byte("xyz"))
	require.NoError(t, err)
	require.Equal(t, append([]byte("xyz"), enc...), prefixed)
}

func TestRoundTripLarge(t *testing.T) {
	rng := newSeededRand(t)
	f, err := bloom.New(50_000, 0.001)
	require.NoError(t, err)
	added := make([]uint64, 120_000)
	for i := range added {
		added[i] = rng.Uint64()
		f.Add(added[i])
	}
	g, err := bloom.Decode(encode(t, f))
	require.NoError(t, err)
	for _, h := range added {
		require.True(t, g.MayContain(h))
	}
	require.Equal(t, f.EstimatedFalsePositiveRate(), g.EstimatedFalsePositiveRate())
}

func TestUnmarshalBinaryErrorLeavesFilterUnchanged(t *testing.T) {
	f, added := grownFilter(t)
	enc := encode(t, f)
	enc[len(enc)/2] ^= 1
	require.ErrorIs(t, f.UnmarshalBinary(enc), bloom.ErrCorrupt)
	for _, h := range added {
		require.True(t, f.MayContain(h))
	}
}

// TestDecodeDetectsEveryByteFlip flips each byte of an encoding; CRC-32C
// catches every error burst up to 32 bits, so each must be rejected.
func TestDecodeDetectsEveryByteFlip(t *testing.T) {
	f, _ := grownFilter(t)
	enc := encode(t, f)
	for i := range enc {
		for _, flip := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(enc)
			b[i] ^= flip
			g, err := bloom.Decode(b)
			require.ErrorIs(t, err, bloom.ErrCorrupt, "byte %d ^ %#x", i, flip)
			require.Nil(t, g)
		}
	}
}

func TestDecodeRejectsTruncationAndExtension(t *testing.T) {
	f, _ := grownFilter(t)
	enc := encode(t, f)
	for n := range len(enc) {
		_, err := bloom.Decode(enc[:n])
		require.ErrorIs(t, err, bloom.ErrCorrupt, "truncated to %d bytes", n)
		if n >= 4 {
			// Even with a valid checksum, a short encoding is rejected.
			_, err = bloom.Decode(reseal(bytes.Clone(enc[:n])))
			require.ErrorIs(t, err, bloom.ErrCorrupt, "truncated to %d bytes, resealed", n)
		}
	}
	_, err := bloom.Decode(append(bytes.Clone(enc), 0))
	require.ErrorIs(t, err, bloom.ErrCorrupt)
}

// decodeCases edits fields of a valid three-stage encoding and reseals the
// checksum, so each case reaches one field check.
var decodeCases = []struct {
	name string
	edit func(b []byte) []byte
	want error
}{
	{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }, bloom.ErrCorrupt},
	{"future version", func(b []byte) []byte { b[offVersion] = 2; return b }, bloom.ErrUnsupported},
	{"version zero", func(b []byte) []byte { b[offVersion] = 0; return b }, bloom.ErrUnsupported},
	{"unknown hash", func(b []byte) []byte { b[offHashAlg] = 7; return b }, bloom.ErrUnsupported},
	{"flags set", func(b []byte) []byte { b[offFlags+1] = 1; return b }, bloom.ErrCorrupt},
	{"header reserved set", func(b []byte) []byte { b[offReserved] = 1; return b }, bloom.ErrCorrupt},
	{"rate zero", setF64(offFPRate, 0), bloom.ErrCorrupt},
	{"rate negative", setF64(offFPRate, -0.01), bloom.ErrCorrupt},
	{"rate one", setF64(offFPRate, 1), bloom.ErrCorrupt},
	{"rate NaN", setF64(offFPRate, math.NaN()), bloom.ErrCorrupt},
	{"rate infinite", setF64(offFPRate, math.Inf(1)), bloom.ErrCorrupt},
	{"rate tighter than the bits allow", setF64(offFPRate, 1e-200), bloom.ErrCorrupt},
	{"planned zero", set64(offPlanned, 0), bloom.ErrCorrupt},
	{"planned absurd", set64(offPlanned, 1<<62), bloom.ErrCorrupt},
	{"planned above capacities", set64(offPlanned, 9), bloom.ErrCorrupt},
	{"no stages", set32(offStages, 0), bloom.ErrCorrupt},
	{"too many stages", set32(offStages, 17), bloom.ErrCorrupt},
	{"absurd stage count", set32(offStages, math.MaxUint32), bloom.ErrCorrupt},
	{"more stages than descriptors", set32(offStages, 16), bloom.ErrCorrupt},
	{"fewer stages than data", set32(offStages, 2), bloom.ErrCorrupt},
	{"capacity mismatch", set64(desc(1, offCapacity), 17), bloom.ErrCorrupt},
	{"old stage over capacity", set64(desc(0, offCount), 9), bloom.ErrCorrupt},
	{"counts overflow", set64(desc(2, offCount), math.MaxUint64), bloom.ErrCorrupt},
	{"zero blocks", set64(desc(0, offBlocks), 0), bloom.ErrCorrupt},
	{"absurd blocks", set64(desc(2, offBlocks), 1<<60), bloom.ErrCorrupt},
	{"unbacked blocks", set64(desc(2, offBlocks), 1<<30), bloom.ErrCorrupt},
	{"one block too many", add64(desc(2, offBlocks), 1), bloom.ErrCorrupt},
	{"zero probes", set32(desc(1, offK), 0), bloom.ErrCorrupt},
	{"too many probes", set32(desc(1, offK), 65), bloom.ErrCorrupt},
	{"descriptor reserved set", set32(desc(2, offDescRsv), 1), bloom.ErrCorrupt},
	{"extra word", func(b []byte) []byte { return insertBeforeTrailer(b, make([]byte, 8)) }, bloom.ErrCorrupt},
	{"missing word", func(b []byte) []byte { return append(b[:len(b)-12], b[len(b)-4:]...) }, bloom.ErrCorrupt},
}

func desc(stage, field int) int { return headerSize + stage*descSize + field }

func set64(off int, v uint64) func([]byte) []byte {
	return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], v); return b }
}

func add64(off int, d uint64) func([]byte) []byte {
	return func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b[off:], binary.LittleEndian.Uint64(b[off:])+d)
		return b
	}
}

func set32(off int, v uint32) func([]byte) []byte {
	return func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b }
}

func setF64(off int, v float64) func([]byte) []byte { return set64(off, math.Float64bits(v)) }

func insertBeforeTrailer(b, extra []byte) []byte {
	n := len(b) - 4
	return append(append(b[:n:n], extra...), b[n:]...)
}

func TestDecodeValidatesFields(t *testing.T) {
	f, _ := grownFilter(t)
	enc := encode(t, f)
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			edited := tc.edit(bytes.Clone(enc))

			// Unsealed, the edit is caught by the checksum.
			_, err := bloom.Decode(edited)
			require.ErrorIs(t, err, bloom.ErrCorrupt)

			// Resealed, the field check must catch it without allocating
			// anything near what the forged header declares.
			edited = reseal(edited)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			g, err := bloom.Decode(edited)
			runtime.ReadMemStats(&after)
			require.ErrorIs(t, err, tc.want)
			require.Nil(t, g)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20))
			t.Log(err)
		})
	}
}

// FuzzDecode feeds arbitrary bytes to Decode, both as given and with the
// checksum repaired, so that mutations reach the field checks instead of
// stopping at the checksum. Invariants: Decode never panics, rejects input
// only with ErrCorrupt or ErrUnsupported, and whatever it accepts
// re-encodes to exactly the same bytes and behaves as a filter.
func FuzzDecode(f *testing.F) {
	empty, err := bloom.New(8, 0.01)
	require.NoError(f, err)
	grown, _ := grownFilter(f)
	valid := [][]byte{encode(f, empty), encode(f, grown)}
	for _, v := range valid {
		f.Add(v)
	}
	for _, tc := range decodeCases {
		f.Add(reseal(tc.edit(bytes.Clone(valid[1]))))
	}
	f.Add([]byte{})
	f.Add([]byte("OKBF"))

	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		if len(data) >= 4 {
			checkDecode(t, reseal(bytes.Clone(data)))
		}
	})
}

func checkDecode(t *testing.T, data []byte) {
	g, err := bloom.Decode(data)
	if err != nil {
		require.True(t, errors.Is(err, bloom.ErrCorrupt) || errors.Is(err, bloom.ErrUnsupported), "%v", err)
		require.Nil(t, g)
		return
	}
	require.Equal(t, data, encode(t, g))
	est := g.EstimatedFalsePositiveRate()
	require.True(t, est >= 0 && est <= 1, "estimate %v", est)
	g.MayContain(0x1234)
	g.Add(0x5678)
	require.True(t, g.MayContain(0x5678))
}
