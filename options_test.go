package oncekv_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

func TestOpenOptionsValidation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	_, err := oncekv.Open(path, &oncekv.Options{
		OpenTimeout:  -time.Second,
		FileMode:     os.ModeDir | 0o600,
		WindowSpan:   time.Hour,
		Retention:    time.Minute,
		MaxGroupSize: -1,
	})
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	require.ErrorIs(t, err, oncekv.ErrInvalidWindow)
	for _, field := range []string{"OpenTimeout", "FileMode", "MaxGroupSize", "Retention"} {
		require.Contains(t, err.Error(), field, "every bad field is reported at once")
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		require.Equal(t, 1, strings.Count(line, "oncekv: "), "the prefix once per problem: %q", line)
	}
	require.NoFileExists(t, path, "invalid options must not create the file")

	_, err = oncekv.Open("", nil)
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)

	opts := &oncekv.Options{NoSync: true}
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Equal(t, &oncekv.Options{NoSync: true}, opts, "Open must not modify the caller's options")
}

func TestWindowOptionsValidation(t *testing.T) {
	for name, opts := range map[string]*oncekv.Options{
		"retention below span": {WindowSpan: time.Hour, Retention: time.Minute},
		"negative span":        {WindowSpan: -time.Hour},
		"rate too high":        {BloomFalsePositiveRate: 0.5},
		"negative step":        {ExpireStep: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := oncekv.Open(filepath.Join(t.TempDir(), "x.db"), opts)
			require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
		})
	}
}

// TestWindowCountIsBounded: Retention/WindowSpan above the documented
// maximum is refused with ErrInvalidOptions naming both fields, also when
// the span comes from the file.
func TestWindowCountIsBounded(t *testing.T) {
	for _, tc := range []struct {
		span, retention time.Duration
		ok              bool
	}{
		{time.Second, 7 * 24 * time.Hour, false},
		{time.Minute, 7 * 24 * time.Hour, false},
		{2 * time.Minute, 24 * time.Hour, true},
		{time.Minute, 24 * time.Hour, false},
		{time.Hour, 365 * 24 * time.Hour, false},
		{time.Hour, 42 * 24 * time.Hour, true},
		{time.Hour, 43 * 24 * time.Hour, false},
		{10 * time.Minute, 7 * 24 * time.Hour, true},
	} {
		t.Run(fmt.Sprintf("span-%v-retention-%v", tc.span, tc.retention), func(t *testing.T) {
			clock := oncetest.NewClock(epoch)
			_, err := oncekv.Open(filepath.Join(t.TempDir(), "x.db"), timeOpts(clock, tc.span, tc.retention))
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
			for _, want := range []string{"Retention", "WindowSpan", strconv.Itoa(oncekv.MaxWindows)} {
				require.Contains(t, err.Error(), want)
			}
		})
	}
	clock := oncetest.NewClock(epoch)
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := oncekv.Open(path, timeOpts(clock, time.Minute, time.Hour))
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = oncekv.Open(path, timeOpts(clock, 0, 30*24*time.Hour))
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions, "the file's 1m windows over 30 days are too many")
	require.Contains(t, err.Error(), "WindowSpan")
}
