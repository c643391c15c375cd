package window_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/window"
)

var hour = window.Config{Span: time.Hour, Retention: 24 * time.Hour}

func TestStartAlignsToSpan(t *testing.T) {
	base := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Time
		want time.Time
	}{
		{base, base},
		{base.Add(59*time.Minute + 59*time.Second), base},
		{base.Add(time.Hour), base.Add(time.Hour)},
		{base.Add(-time.Nanosecond), base.Add(-time.Hour)},
		{time.Unix(0, -1), time.Unix(-3600, 0)}, // floor, not truncation, before 1970
		{time.Unix(0, 0), time.Unix(0, 0)},
	} {
		require.Equal(t, tc.want.UnixNano(), hour.Start(tc.at), tc.at.String())
	}
}

func TestExpiredKeepsEveryMarkForTheRetention(t *testing.T) {
	start := hour.Start(time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC))
	end := time.Unix(0, hour.End(start))
	// The last mark of the window may be first seen a nanosecond before its
	// end; it must live the full retention.
	require.False(t, hour.Expired(start, end.Add(hour.Retention-time.Nanosecond)))
	require.True(t, hour.Expired(start, end.Add(hour.Retention)))
	require.False(t, hour.Expired(start, end.Add(-48*time.Hour)), "a clock behind never expires anything")
}

func TestValidate(t *testing.T) {
	require.NoError(t, hour.Validate())
	require.NoError(t, window.Config{Span: time.Hour, Retention: time.Hour}.Validate())
	err := window.Config{Span: 0, Retention: -1}.Validate()
	require.ErrorIs(t, err, window.ErrInvalidConfig)
	require.Contains(t, err.Error(), "span")
	require.Contains(t, err.Error(), "retention")
	require.ErrorIs(t, window.Config{Span: time.Hour, Retention: time.Minute}.Validate(), window.ErrInvalidConfig)
}
