package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// advisedStore is a store whose handlers' duplicates come at different
// ages, against a Retention of a day and a TombstoneRetention of three:
// pay's within minutes, mail's after 13 to 20 hours, ship's after
// Retention (from tombstones) and after TombstoneRetention (late, applied
// again).
func advisedStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "advised.db")
	c := &fakeClock{now: t0}
	opts := &oncekv.Options{Now: c.Now, NoSync: true, ExpireInterval: -1, Retention: 24 * time.Hour, WindowSpan: time.Hour,
		TombstoneRetention: 72 * time.Hour, MaxClockJump: -1}
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	ctx := context.Background()
	apply := func(h, k string) {
		_, err := db.Apply(ctx, oncekv.Request{Handler: h, Key: k}, nil)
		require.NoError(t, err)
	}
	for i := range 40 {
		apply("pay", fmt.Sprintf("p%d", i))
		apply("mail", fmt.Sprintf("m%d", i))
		apply("ship", fmt.Sprintf("s%d", i))
	}
	c.now = t0.Add(3 * time.Minute)
	for i := range 40 {
		apply("pay", fmt.Sprintf("p%d", i))
	}
	c.now = t0.Add(13 * time.Hour)
	for i := range 30 {
		apply("mail", fmt.Sprintf("m%d", i))
	}
	c.now = t0.Add(20 * time.Hour)
	apply("mail", "m39")
	c.now = t0.Add(30 * time.Hour)
	_, err = db.Expire(ctx)
	require.NoError(t, err)
	for i := range 5 {
		apply("ship", fmt.Sprintf("s%d", i)) // from tombstones
	}
	c.now = t0.Add(80 * time.Hour)
	_, err = db.Expire(ctx)
	require.NoError(t, err)
	apply("ship", "s39") // late: every record gone
	require.NoError(t, db.Close())
	return path
}

func TestAdviseGolden(t *testing.T) {
	path := advisedStore(t)
	r := cli(t, "advise", path)
	require.Equal(t, 0, r.code, r.stderr)
	golden(t, "advise.golden", r.stdout)

	r = cli(t, "advise", "-json", path)
	require.Equal(t, 0, r.code, r.stderr)
	verdicts := map[string]string{}
	for _, line := range lines(r.stdout) {
		var a struct {
			Handler             string  `json:"handler"`
			Verdict             string  `json:"verdict"`
			Max                 float64 `json:"max_seconds"`
			TombstoneDuplicates uint64  `json:"tombstone_duplicates"`
			LateDuplicates      uint64  `json:"late_duplicates"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &a))
		verdicts[a.Handler] = a.Verdict
		if a.Handler == "ship" {
			require.EqualValues(t, 5, a.TombstoneDuplicates)
			require.EqualValues(t, 1, a.LateDuplicates)
		}
	}
	require.Equal(t, map[string]string{"pay": "comfortable", "mail": "thin", "ship": "late"}, verdicts)

	// Judged against a longer Retention, mail's margin is comfortable.
	r = cli(t, "advise", "-json", "-retention", "168h", path)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"handler":"mail"`)
	require.NotContains(t, r.stdout, `"verdict":"thin"`)
}
