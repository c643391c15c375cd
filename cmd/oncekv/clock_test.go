package main_test

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// TestClockShowsAndRewindsAFutureClock: a store whose clock was saved 50
// years ahead is shown as ahead with the command that fixes it, and
// -rewind brings it back with its marks kept.
func TestClockShowsAndRewindsAFutureClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	future := t0.Add(50 * 365 * 24 * time.Hour)
	db, err := oncekv.Open(path, &oncekv.Options{Now: func() time.Time { return future }})
	require.NoError(t, err)
	_, err = db.Apply(t.Context(), oncekv.Request{Handler: "pay", Key: "order-1"}, func(*oncekv.Tx) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	require.NoError(t, db.Close())

	r := cli(t, "clock", path, "-now", at(0))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "store:   "+future.Format(time.RFC3339Nano))
	require.Contains(t, r.stdout, "ahead of this machine's")
	require.Contains(t, r.stdout, "oncekv clock -rewind now "+path)

	r = cli(t, "clock", "-rewind", "now", "-now", at(0), "-json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		Store   time.Time `json:"store"`
		Rewound struct {
			Marks   int
			Windows int
		} `json:"rewound"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.True(t, out.Store.Equal(t0), "%v", out.Store)
	require.Equal(t, 1, out.Rewound.Marks)

	r = cli(t, "clock", path, "-now", at(0))
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout, "ahead")
	r = cli(t, "mark", path, "pay", "order-1", "-now", at(time.Minute))
	require.Equal(t, 0, r.code, "the mark is kept: %s", r.stderr)

	r = cli(t, "clock", "-rewind", "yesterday", path)
	require.Equal(t, 2, r.code, "a bad time is bad usage")
	r = cli(t, "clock", "-rewind", "now", filepath.Join(t.TempDir(), "none.db"))
	require.Equal(t, 2, r.code, "a missing file")
}
