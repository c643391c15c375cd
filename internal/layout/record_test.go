package layout_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/envelope"
	"github.com/oncekv/oncekv/internal/layout"
)

func sampleMarks() []layout.Mark {
	return []layout.Mark{
		{State: layout.Done, PayloadHash: [32]byte{1, 2, 3}, Response: []byte("ok"), FirstSeen: 1_700_000_000_000_000_000},
		{State: layout.Done, Response: []byte{}, FirstSeen: -5},
		{State: layout.Done, Response: nil},
		{State: layout.Failed, Error: "card declined", FirstSeen: 1},
		{State: layout.InProgress, LeaseUntil: math.MaxInt64, Token: math.MaxUint64, FirstSeen: math.MinInt64},
		{State: layout.Done, Response: bytes.Repeat([]byte{0xff}, 1<<16), Error: strings.Repeat("x", 300)},
	}
}

// v3Marks are marks only record version 3 holds: a takeover's claim, a
// parked key, a final mark that was taken over.
func v3Marks() []layout.Mark {
	return []layout.Mark{
		{State: layout.InProgress, PayloadHash: [32]byte{7}, LeaseUntil: 9, Token: 3, FirstSeen: 1, AttemptStart: 5, Takeovers: 1},
		{State: layout.Parked, Token: 3, FirstSeen: -1, AttemptStart: math.MinInt64, Takeovers: math.MaxUint64},
		{State: layout.Parked},
		{State: layout.Done, Response: []byte{}, Token: 4, Takeovers: 2},
		{State: layout.Failed, Error: "declined", AttemptStart: math.MaxInt64},
	}
}

// TestMarkV3RoundTrip: the marks of record version 3 read back as written,
// and a mark version 2 holds is still written as version 2, byte for byte
// as before.
func TestMarkV3RoundTrip(t *testing.T) {
	for _, m := range v3Marks() {
		raw := m.Marshal()
		require.Equal(t, byte(3), raw[0], "%+v", m)
		var got layout.Mark
		require.NoError(t, got.Unmarshal(raw))
		require.Equal(t, m, got)
	}
	for _, m := range sampleMarks() {
		require.Equal(t, byte(2), m.Marshal()[0], "%+v", m)
	}
	// A v2 DONE mark with a 2-byte response, as format 3 files hold it.
	old := layout.Mark{State: layout.Done, PayloadHash: [32]byte{1}, Response: []byte("ok"), FirstSeen: 1}
	want := append([]byte{2, 0x06, 1}, make([]byte, 15)...)
	want = append(want, 1, 0, 0, 0, 0, 0, 0, 0, 2, 'o', 'k')
	require.Equal(t, want, old.Marshal()[:len(want)])
}

func TestMarkRoundTrip(t *testing.T) {
	for _, m := range sampleMarks() {
		var got layout.Mark
		require.NoError(t, got.Unmarshal(m.Marshal()))
		require.Equal(t, m, got)
		require.Equal(t, m.Response == nil, got.Response == nil, "nil and empty responses stay distinct")
	}
}

// TestMarkKeepsFingerprintOnly: a mark stores the first FingerprintSize
// bytes of the payload hash, and reads back with the rest zero, which is
// what layout.Fingerprint makes of a request's hash.
func TestMarkKeepsFingerprintOnly(t *testing.T) {
	var sum [layout.HashSize]byte
	for i := range sum {
		sum[i] = byte(i + 1)
	}
	m := layout.Mark{State: layout.Done, PayloadHash: sum, Response: []byte("ok")}
	for name, raw := range map[string][]byte{"current": m.Marshal(), "legacy": m.MarshalLegacy()} {
		var got layout.Mark
		require.NoError(t, got.Unmarshal(raw), name)
		require.Equal(t, layout.Fingerprint(sum), got.PayloadHash, name)
		require.Equal(t, sum[:layout.FingerprintSize], got.PayloadHash[:layout.FingerprintSize], name)
		require.Equal(t, make([]byte, layout.HashSize-layout.FingerprintSize), got.PayloadHash[layout.FingerprintSize:], name)
	}
}

// TestLegacyMarkDecodes: the msgpack marks of files before format 3 read
// as the same marks (their hash cut to the fingerprint), and encode again
// in the current form, which reads back the same.
func TestLegacyMarkDecodes(t *testing.T) {
	for _, m := range sampleMarks() {
		var old layout.Mark
		require.NoError(t, old.Unmarshal(m.MarshalLegacy()))
		want := m
		want.PayloadHash = layout.Fingerprint(m.PayloadHash)
		require.Equal(t, want, old)
		require.Equal(t, m.Response == nil, old.Response == nil)

		raw := old.Marshal()
		require.NotEqual(t, m.MarshalLegacy()[0], raw[0], "written in the new form")
		var again layout.Mark
		require.NoError(t, again.Unmarshal(raw))
		require.Equal(t, want, again)
	}
}

// TestMarkSize pins the bytes of a DONE mark with a 64-byte response, the
// bench module's mark: version, head, fingerprint, first seen, response
// length and bytes, checksum; nothing for the absent fields.
func TestMarkSize(t *testing.T) {
	m := layout.Mark{State: layout.Done, PayloadHash: [32]byte{9}, Response: bytes.Repeat([]byte{'r'}, 64),
		FirstSeen: 1_764_556_800_000_000_000}
	require.Len(t, m.Marshal(), 1+1+16+8+1+64+4)
	require.Len(t, m.MarshalLegacy(), 136, "the msgpack form it replaces")
	claim := layout.Mark{State: layout.InProgress, LeaseUntil: m.FirstSeen + 30e9, Token: 7, FirstSeen: m.FirstSeen}
	require.Len(t, claim.Marshal(), 1+1+16+8+9+1+4)
}

// TestMarkCodecAllocations: encoding allocates only the value bbolt
// keeps; decoding only the Response copy (or the Error of a FAILED mark).
func TestMarkCodecAllocations(t *testing.T) {
	for _, m := range sampleMarks()[:4] {
		raw := m.Marshal()
		var got layout.Mark
		require.InDelta(t, 1, testing.AllocsPerRun(100, func() { raw = m.Marshal() }), 0)
		want := 0.0
		if len(m.Response) > 0 || m.Error != "" {
			want = 1
		}
		require.InDelta(t, want, testing.AllocsPerRun(100, func() {
			if got.Unmarshal(raw) != nil {
				panic("the sample does not decode")
			}
		}), 0, "%+v", m)
	}
}

// TestMarkDecodeRejectsNonCanonical: each field has one encoding, so a
// body with a valid checksum but another encoding of the same mark is
// refused, as the fuzz target's round trip requires.
func TestMarkDecodeRejectsNonCanonical(t *testing.T) {
	fixed := append([]byte{byte(layout.Done)}, make([]byte, 16+8)...)
	for name, body := range map[string][]byte{
		"unknown head bit":    append([]byte{byte(layout.Done) | 0x40}, make([]byte, 16+8)...),
		"state zero":          make([]byte, 1+16+8),
		"short":               fixed[:20],
		"empty error present": append(withHead(fixed, 1<<3), 0),
		"zero token present":  append(withHead(fixed, 1<<5), 0),
		"zero lease present":  append(withHead(fixed, 1<<4), 0),
		"non-minimal length":  append(withHead(fixed, 1<<2), 0x81, 0x00, 'x'),
		"length past the end": append(withHead(fixed, 1<<2), 5, 'x'),
		"varint overflow":     append(withHead(fixed, 1<<5), bytes.Repeat([]byte{0xff}, 11)...),
		"trailing byte":       append(bytes.Clone(fixed), 0),
		"field missing":       withHead(fixed, 1<<2),
		"record version 4":    nil,
	} {
		version := byte(2)
		if body == nil {
			version, body = 4, fixed
		}
		raw := envelope.Alloc(version, len(body))
		copy(envelope.Body(raw), body)
		envelope.Finish(raw)
		var m layout.Mark
		require.Error(t, m.Unmarshal(raw), name)
	}
}

// TestMarkV3DecodeRejectsNonCanonical: record version 3 refuses a mark
// version 2 holds, a head bit it does not know, PARKED's state in version
// 2 or in the msgpack form, and an attempt field present with its zero.
func TestMarkV3DecodeRejectsNonCanonical(t *testing.T) {
	fp := make([]byte, 16+8)
	for name, rec := range map[string][]byte{
		"a v2 mark":            append([]byte{3, byte(layout.Done)}, fp...),
		"unknown head bit":     append([]byte{3, 0x80 | byte(layout.Parked), 0x04}, fp...),
		"non-minimal head":     append([]byte{3, 0x80 | byte(layout.Parked), 0x00}, fp...),
		"state five":           append([]byte{3, 5}, fp...),
		"zero attempt present": append(append([]byte{3, 0x80 | byte(layout.Parked), 0x01}, fp...), make([]byte, 8)...),
		"zero takeovers":       append(append([]byte{3, 0x80 | byte(layout.Parked), 0x02}, fp...), 0),
		"attempt cut short":    append(append([]byte{3, 0x80 | byte(layout.Parked), 0x01}, fp...), 1, 2, 3),
		"parked in version 2":  append([]byte{2, byte(layout.Parked)}, fp...),
	} {
		raw := envelope.Alloc(rec[0], len(rec)-1)
		copy(envelope.Body(raw), rec[1:])
		envelope.Finish(raw)
		var m layout.Mark
		require.Error(t, m.Unmarshal(raw), name)
	}
	legacy := layout.Mark{State: layout.Parked}
	var m layout.Mark
	require.Error(t, m.Unmarshal(legacy.MarshalLegacy()), "PARKED in the msgpack form")
}

func withHead(body []byte, bits byte) []byte {
	out := bytes.Clone(body)
	out[0] |= bits
	return out
}

func TestMarkDecodeRejectsDamage(t *testing.T) {
	m, v3 := sampleMarks()[0], v3Marks()[0]
	for _, raw := range [][]byte{m.Marshal(), m.MarshalLegacy(), v3.Marshal()} {
		for i := range raw {
			for _, bit := range []byte{0x01, 0x80} {
				damaged := bytes.Clone(raw)
				damaged[i] ^= bit
				var m layout.Mark
				require.Error(t, m.Unmarshal(damaged), "byte %d bit %x flipped", i, bit)
			}
		}
		for n := range raw {
			var m layout.Mark
			require.Error(t, m.Unmarshal(raw[:n]), "truncated to %d bytes", n)
		}
		var m layout.Mark
		require.Error(t, m.Unmarshal(append(bytes.Clone(raw), 0)), "trailing byte")
	}
}

// BenchmarkMarkUnmarshal decodes the bench module's DONE mark (64-byte
// response) from the msgpack form of format 2 and from the current one.
func BenchmarkMarkUnmarshal(b *testing.B) {
	m := layout.Mark{State: layout.Done, PayloadHash: [32]byte{9}, Response: bytes.Repeat([]byte{'r'}, 64),
		FirstSeen: 1_764_556_800_000_000_000}
	for _, form := range []struct {
		name string
		raw  []byte
	}{{"legacy", m.MarshalLegacy()}, {"current", m.Marshal()}} {
		b.Run(form.name, func(b *testing.B) {
			b.ReportAllocs()
			var got layout.Mark
			for b.Loop() {
				if err := got.Unmarshal(form.raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMarkMarshal encodes the same mark in both forms.
func BenchmarkMarkMarshal(b *testing.B) {
	m := layout.Mark{State: layout.Done, PayloadHash: [32]byte{9}, Response: bytes.Repeat([]byte{'r'}, 64),
		FirstSeen: 1_764_556_800_000_000_000}
	for _, form := range []struct {
		name string
		enc  func() []byte
	}{{"legacy", m.MarshalLegacy}, {"current", m.Marshal}} {
		b.Run(form.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = form.enc()
			}
		})
	}
}

func TestMarkKeyRoundTripAndLimits(t *testing.T) {
	for _, tc := range []struct{ h, k string }{{"h", "k"}, {"ab", "c"}, {"a", "bc"}, {"", ""}, {"\x00", "\xff\xfe"}} {
		h, k, ok := layout.SplitMarkKey(layout.MarkKey(tc.h, tc.k))
		require.True(t, ok)
		require.Equal(t, tc.h, h)
		require.Equal(t, tc.k, k)
	}
	require.NotEqual(t, layout.MarkKey("ab", "c"), layout.MarkKey("a", "bc"))
	_, _, ok := layout.SplitMarkKey([]byte{0, 9, 'a'})
	require.False(t, ok)
	require.NoError(t, layout.CheckMarkKey("h", strings.Repeat("k", layout.MaxMarkKeySize-1)))
	require.ErrorIs(t, layout.CheckMarkKey("h", strings.Repeat("k", layout.MaxMarkKeySize)), base.ErrKeyTooLarge)
	require.ErrorIs(t, layout.CheckMarkKey(strings.Repeat("h", 70000), ""), base.ErrKeyTooLarge)
}

func TestWindowNamesSortInTimeOrder(t *testing.T) {
	starts := []int64{math.MinInt64, -3_600_000_000_000, -1, 0, 1, 3_600_000_000_000, math.MaxInt64}
	for i, s := range starts {
		got, ok := layout.ParseWindowName(layout.WindowName(s))
		require.True(t, ok)
		require.Equal(t, s, got)
		if i > 0 {
			require.Negative(t, bytes.Compare(layout.WindowName(starts[i-1]), layout.WindowName(s)))
		}
	}
	_, ok := layout.ParseWindowName([]byte("u/oncekv.window/x"))
	require.False(t, ok)
}

func TestFormatAndExpiryRoundTrip(t *testing.T) {
	f := layout.Format{Magic: layout.FormatMagic, Version: layout.FormatVersion, CreatedUnixNano: 42}
	var gotF layout.Format
	require.NoError(t, gotF.Unmarshal(f.Marshal()))
	require.Equal(t, f, gotF)
	e := layout.Expiry{Floor: -7}
	var gotE layout.Expiry
	require.NoError(t, gotE.Unmarshal(e.Marshal()))
	require.Equal(t, e, gotE)
	require.Error(t, gotE.Unmarshal(f.Marshal()), "a record of another kind does not decode as this one")
}

// FuzzMarkUnmarshal feeds arbitrary bytes to the mark decoder: it must never
// panic, and whatever it accepts in the current form must encode back to
// the same bytes, so a damaged record cannot decode to a different,
// plausible mark. A mark it accepts in the msgpack form of older files
// encodes to the current form, which decodes to the same mark.
func FuzzMarkUnmarshal(f *testing.F) {
	for _, m := range sampleMarks() {
		f.Add(m.Marshal())
		f.Add(m.MarshalLegacy())
	}
	for _, m := range v3Marks() {
		f.Add(m.Marshal())
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0x97})
	f.Add([]byte{2, 0x02})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var m layout.Mark
		if err := m.Unmarshal(raw); err != nil {
			return
		}
		again := m.Marshal()
		if raw[0] != again[0] {
			var m2 layout.Mark
			require.NoError(t, m2.Unmarshal(again))
			require.Equal(t, m, m2)
			return
		}
		require.Equal(t, raw, again)
	})
}

// FuzzFormatUnmarshal does the same for the format record.
func FuzzFormatUnmarshal(f *testing.F) {
	f.Add(layout.Format{Magic: layout.FormatMagic, Version: 1}.Marshal())
	f.Add(layout.Expiry{Floor: 3}.Marshal())
	f.Fuzz(func(t *testing.T, raw []byte) {
		var rec layout.Format
		if err := rec.Unmarshal(raw); err != nil {
			return
		}
		require.Equal(t, raw, rec.Marshal())
	})
}
