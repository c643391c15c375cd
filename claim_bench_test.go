package oncekv_test

import (
	"context"
	"testing"
	"time"

	"github.com/oncekv/oncekv"
)

// BenchmarkClaimCompleteVsApply, durable: the two-phase Claim then
// Complete against one Apply of the same local write, timed alternately
// (see pair). A claim commits twice, so it pays two fsyncs where Apply
// pays one.
//
//	go test -run '^$' -bench 'ClaimCompleteVsApply' -benchtime 2000x .
func BenchmarkClaimCompleteVsApply(b *testing.B) {
	db := openBench(b, false)
	var claimCommits uint64
	pair(b, 1, "apply", func(i uint64) { applyUnique(b, db, i) }, "claim+complete", func(i uint64) {
		before := db.Stats().Commits
		if err := claimComplete(db, i); err != nil {
			b.Fatal(err)
		}
		claimCommits += db.Stats().Commits - before
	})
	b.ReportMetric(float64(claimCommits)/float64(b.N), "commits/claim")
}

// BenchmarkConcurrentClaim8Vs1, durable: a first request through idemhttp
// is a Claim then a Complete. 64 of them by one goroutine against 64 by
// eight at once: both steps ride the group commit, so the eight share
// fsyncs instead of taking turns at the write lock.
//
//	go test -run '^$' -bench 'ConcurrentClaim8Vs1' -benchtime 50x .
func BenchmarkConcurrentClaim8Vs1(b *testing.B) {
	concurrent8Vs1(b, claimComplete)
}

// claimComplete claims a new key and completes it with the benchmarks'
// local write.
func claimComplete(db *oncekv.DB, i uint64) error {
	ctx := context.Background()
	key := benchKey(i)
	c, err := db.Claim(ctx, oncekv.Request{Handler: "bench-claim", Key: string(key), Payload: benchValue}, time.Minute)
	if err != nil {
		return err
	}
	_, err = c.Complete(ctx, []byte("ok"), func(tx *oncekv.Tx) error {
		_, err := putEffect(tx, key)
		return err
	})
	return err
}
