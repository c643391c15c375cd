package oncetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/applycount"
)

// RequireAppliedOnce requires that applycount counted each key of want
// exactly once in db (none lost, none doubled) and no other key.
func RequireAppliedOnce(t testing.TB, db *oncekv.DB, want []string) {
	t.Helper()
	got := Applied(t, db)
	lost, doubled := 0, 0
	for _, k := range want {
		switch n := got[k]; {
		case n == 0:
			lost++
		case n > 1:
			doubled++
		}
	}
	require.Zero(t, lost, "keys never applied")
	require.Zero(t, doubled, "keys applied more than once")
	require.Len(t, got, len(want), "keys applied that were never sent")
}

// Applied returns applycount's count of every key in db.
func Applied(t testing.TB, db *oncekv.DB) map[string]uint64 {
	t.Helper()
	got, err := applycount.Read(db)
	require.NoError(t, err)
	return got
}
