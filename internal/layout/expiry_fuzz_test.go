package layout_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/layout"
)

// FuzzExpiryUnmarshal: the expiry record's decoder never panics, and what
// it accepts encodes back to the same bytes, so a damaged floor cannot
// decode to another plausible floor (which would drop live marks or bring
// expired ones back).
func FuzzExpiryUnmarshal(f *testing.F) {
	for _, floor := range []int64{math.MinInt64, -1, 0, 1, 1_700_000_000_000_000_000, math.MaxInt64} {
		f.Add(layout.Expiry{Floor: floor}.Marshal())
	}
	f.Add(layout.Format{Magic: layout.FormatMagic, Version: 1}.Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var e layout.Expiry
		if err := e.Unmarshal(raw); err != nil {
			return
		}
		require.Equal(t, raw, e.Marshal())
	})
}

// FuzzWindowsUnmarshal: the windows record's decoder never panics, accepts
// only a positive span, and what it accepts encodes back to the same
// bytes: a damaged span must not pass for another one.
func FuzzWindowsUnmarshal(f *testing.F) {
	for _, span := range []int64{-1, 0, 1, int64(time.Hour), math.MaxInt64} {
		f.Add(layout.Windows{Span: span}.Marshal())
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var w layout.Windows
		if err := w.Unmarshal(raw); err != nil {
			return
		}
		require.Positive(t, w.Span)
		require.Equal(t, raw, w.Marshal())
	})
}

// FuzzLeaseEndUnmarshal: the lease-end record's decoder never panics, and
// what it accepts encodes back to the same bytes.
func FuzzLeaseEndUnmarshal(f *testing.F) {
	for _, end := range []int64{math.MinInt64, 0, 1_700_000_000_000_000_000, math.MaxInt64} {
		f.Add(layout.LeaseEnd{End: end}.Marshal())
	}
	f.Add([]byte{1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var l layout.LeaseEnd
		if err := l.Unmarshal(raw); err != nil {
			return
		}
		require.Equal(t, raw, l.Marshal())
	})
}
