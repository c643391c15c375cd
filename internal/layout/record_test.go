package layout_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/base"
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

func TestMarkRoundTrip(t *testing.T) {
	for _, m := range sampleMarks() {
		var got layout.Mark
		require.NoError(t, got.Unmarshal(m.Marshal()))
		require.Equal(t, m, got)
		require.Equal(t, m.Response == nil, got.Response == nil, "nil and empty responses stay distinct")
	}
}

func TestMarkDecodeRejectsDamage(t *testing.T) {
	raw := sampleMarks()[0].Marshal()
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
// panic, and whatever it accepts must encode back to the same bytes, so a
// damaged record cannot decode to a different, plausible mark.
func FuzzMarkUnmarshal(f *testing.F) {
	for _, m := range sampleMarks() {
		f.Add(m.Marshal())
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0x97})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var m layout.Mark
		if err := m.Unmarshal(raw); err != nil {
			return
		}
		require.Equal(t, raw, m.Marshal())
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
