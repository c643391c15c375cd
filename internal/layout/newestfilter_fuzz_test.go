package layout_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/layout"
)

// FuzzFilterStampUnmarshal: the stamp of the persisted newest-window filter
// never panics its decoder, and what it accepts encodes back to the same
// bytes: a damaged stamp must not pass for the stamp of another state of
// the file, or Open would trust a filter that lacks keys.
func FuzzFilterStampUnmarshal(f *testing.F) {
	for _, s := range []layout.FilterStamp{
		{},
		{Window: 1_700_000_000_000_000_000, TxID: 42, Marks: 1_000_000, Root: 77},
		{Window: math.MinInt64, TxID: math.MaxUint64, Marks: math.MaxUint64, Root: math.MaxUint64},
	} {
		f.Add(s.Marshal())
	}
	f.Add(layout.Expiry{Floor: 1}.Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var s layout.FilterStamp
		if err := s.Unmarshal(raw); err != nil {
			return
		}
		require.Equal(t, raw, s.Marshal())
	})
}
