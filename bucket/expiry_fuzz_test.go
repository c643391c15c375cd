package bucket_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/bucket"
)

// FuzzExpiryUnmarshal: the expiry record's decoder never panics, and what
// it accepts encodes back to the same bytes, so a damaged floor cannot
// decode to another plausible floor (which would drop live marks or bring
// expired ones back).
func FuzzExpiryUnmarshal(f *testing.F) {
	for _, floor := range []int64{math.MinInt64, -1, 0, 1, 1_700_000_000_000_000_000, math.MaxInt64} {
		f.Add(bucket.Expiry{Floor: floor}.Marshal())
	}
	f.Add(bucket.Format{Magic: bucket.FormatMagic, Version: 1}.Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var e bucket.Expiry
		if err := e.Unmarshal(raw); err != nil {
			return
		}
		require.Equal(t, raw, e.Marshal())
	})
}
