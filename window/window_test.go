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

func TestSetAddFindDrop(t *testing.T) {
	h := int64(time.Hour)
	s := window.NewSet(nil, -1<<63)
	require.Nil(t, s.Newest())
	for _, start := range []int64{2 * h, 0, 5 * h, 3 * h} {
		s.Add(&window.Live{Start: start})
	}
	var starts []int64
	for _, w := range s.Windows() {
		starts = append(starts, w.Start)
	}
	require.Equal(t, []int64{0, 2 * h, 3 * h, 5 * h}, starts, "kept in time order")
	require.Equal(t, 5*h, s.Newest().Start)
	require.Equal(t, 3*h, s.Find(3*h).Start)
	require.Nil(t, s.Find(4*h))

	before := s.Windows()
	dropped := s.DropBelow(3 * h)
	require.Len(t, dropped, 2)
	require.Equal(t, 3*h, s.Floor())
	require.Len(t, s.Windows(), 2)
	require.Len(t, before, 4, "a reader's snapshot is not changed under it")
	require.Nil(t, s.DropBelow(h), "the floor never goes down")
	require.Equal(t, 3*h, s.Floor())
}

func TestPlaceNeverGoesBackwards(t *testing.T) {
	h := int64(time.Hour)
	s := window.NewSet(nil, -1<<63)
	require.Equal(t, 10*h, hour.Place(10*h+5, s))

	s.Add(&window.Live{Start: 10 * h})
	require.Equal(t, 10*h, hour.Place(3*h, s), "a clock behind the newest window uses the newest")
	require.Equal(t, 11*h, hour.Place(11*h, s))

	s.DropBelow(11 * h) // everything up to 11:00 expired
	require.Equal(t, 11*h, hour.Place(3*h, s), "never below the expiry floor")
	require.Equal(t, 12*h, hour.Place(12*h+1, s))

	// A floor not on this span's boundary (the span changed between opens)
	// rounds up, so the mark's window starts at or after the floor.
	odd := window.NewSet(nil, 11*h+1)
	require.Equal(t, 12*h, hour.Place(0, odd))
}
