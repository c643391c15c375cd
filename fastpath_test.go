package oncekv_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// callerStack reports whether the goroutine calling it has fn's frame on
// its stack.
func callerStack(fn string) bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "oncekv_test."+fn+"(")
}

// TestLoneApplyRunsItsEffectOnTheCallersGoroutine: a call that commits
// alone takes the group commit's fast path, its effect running on the
// caller's own goroutine rather than on one started for it (Apply's doc);
// so does a claim's Complete.
func TestLoneApplyRunsItsEffectOnTheCallersGoroutine(t *testing.T) {
	const self = "TestLoneApplyRunsItsEffectOnTheCallersGoroutine"
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	var onCaller bool
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "apply"}, func(*oncekv.Tx) ([]byte, error) {
		onCaller = callerStack(self)
		return []byte("ok"), nil
	})
	require.NoError(t, err)
	require.Equal(t, []byte("ok"), res.Response)
	require.True(t, onCaller, "Apply's effect ran on another goroutine than its caller's")

	c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "claim"}, time.Hour)
	require.NoError(t, err)
	onCaller = false
	_, err = c.Complete(ctx, []byte("done"), func(*oncekv.Tx) error {
		onCaller = callerStack(self)
		return nil
	})
	require.NoError(t, err)
	require.True(t, onCaller, "Complete's effect ran on another goroutine than its caller's")
}
