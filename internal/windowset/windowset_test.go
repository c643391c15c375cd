package windowset_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/windowset"
	"github.com/oncekv/oncekv/window"
)

var hour = window.Config{Span: time.Hour, Retention: 24 * time.Hour}

func TestSetAddFindDrop(t *testing.T) {
	h := int64(time.Hour)
	s := windowset.NewSet(nil, -1<<63)
	require.Nil(t, s.Newest())
	for _, start := range []int64{2 * h, 0, 5 * h, 3 * h} {
		s.Add(&windowset.Live{Start: start})
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
	s := windowset.NewSet(nil, -1<<63)
	require.Equal(t, 10*h, s.Place(hour, 10*h+5))

	s.Add(&windowset.Live{Start: 10 * h})
	require.Equal(t, 10*h, s.Place(hour, 3*h), "a clock behind the newest window uses the newest")
	require.Equal(t, 11*h, s.Place(hour, 11*h))

	s.DropBelow(11 * h) // everything up to 11:00 expired
	require.Equal(t, 11*h, s.Place(hour, 3*h), "never below the expiry floor")
	require.Equal(t, 12*h, s.Place(hour, 12*h+1))

	// A floor not on this span's boundary (the span changed between opens)
	// rounds up, so the mark's window starts at or after the floor.
	odd := windowset.NewSet(nil, 11*h+1)
	require.Equal(t, 12*h, odd.Place(hour, 0))
}
