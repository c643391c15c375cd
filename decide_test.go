package oncekv_test

import (
	"context"
	"fmt"
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

// TestLoneApplyGoexitCountsAsEffectError: on the fast path, an effect that
// calls runtime.Goexit ends its caller's goroutine there and then, and the
// request still counts in Stats.EffectErrors, as it does when its commit
// is shared.
func TestLoneApplyGoexitCountsAsEffectError(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	returned, p, hung := within(t, "Apply", func() {
		_, _ = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, func(*oncekv.Tx) ([]byte, error) {
			runtime.Goexit()
			return nil, nil
		})
	})
	require.False(t, hung)
	require.False(t, returned, "the caller's goroutine exits")
	require.Nil(t, p)
	st := db.Stats()
	require.Equal(t, uint64(1), st.Total.EffectErrors)
	require.Equal(t, uint64(1), st.Handlers["h"].EffectErrors)
	require.Zero(t, st.Total.Applied)
}

// TestApplyBatchRepeatsAKeyAfterManyMarks: a key that comes again later in
// the same ApplyBatch is a duplicate, whether the transaction has written
// a few marks before it (looked up one by one) or many (looked up by hash):
// its effect runs once and the repeat gets the first response back.
func TestApplyBatchRepeatsAKeyAfterManyMarks(t *testing.T) {
	for _, n := range []int{3, 40} {
		t.Run(fmt.Sprint(n, " keys"), func(t *testing.T) {
			db := oncetest.Open(t, &oncekv.Options{NoSync: true})
			var reqs []oncekv.Request
			for i := range n {
				reqs = append(reqs, oncekv.Request{Handler: "h", Key: fmt.Sprint("k", i)})
			}
			reqs = append(reqs, reqs[1], reqs[n-1])
			runs := map[string]int{}
			res, err := db.ApplyBatch(context.Background(), reqs, func(_ *oncekv.Tx, i int) ([]byte, error) {
				runs[reqs[i].Key]++
				return []byte(reqs[i].Key), nil
			})
			require.NoError(t, err)
			for i, r := range res {
				require.NoError(t, r.Err)
				require.Equal(t, []byte(reqs[i].Key), r.Response)
				require.Equal(t, i >= n, r.Duplicate, "request %d", i)
			}
			for _, req := range reqs {
				require.Equal(t, 1, runs[req.Key], "effect runs of %s", req.Key)
			}
		})
	}
}
