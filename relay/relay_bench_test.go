package relay_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
)

// BenchmarkRelayAcksShareCommits drains, in one run, a backlog of b.N
// messages from a durable store (an fsync per commit) with one worker and
// with four, for a send that returns at once and for one that sleeps
// 200µs (about 0.5 ms with the timer's granularity): msgs/s and messages
// acked per commit of each, and the ratio four workers / one. With one worker, "1w-send-share"
// is the share of its time spent sending: a worker that sent its next
// message while its ack commits would gain at most
// 1/max(share, 1-share).
//
//	go test -run '^$' -bench RelayAcksShareCommits -benchtime 2000x -count 3 ./relay
func BenchmarkRelayAcksShareCommits(b *testing.B) {
	for _, delay := range []time.Duration{0, 200 * time.Microsecond} {
		b.Run(fmt.Sprintf("send=%v", delay), func(b *testing.B) {
			rates := map[int]float64{}
			for _, workers := range []int{1, 4} {
				rate, perCommit, share := drain(b, b.N, workers, delay)
				rates[workers] = rate
				b.ReportMetric(rate, fmt.Sprintf("%dw-msgs/s", workers))
				b.ReportMetric(perCommit, fmt.Sprintf("%dw-msgs/commit", workers))
				if workers == 1 {
					b.ReportMetric(share, "1w-send-share")
				}
			}
			b.ReportMetric(rates[4]/rates[1], "x-4w/1w")
		})
	}
}

// drain enqueues n messages in a fresh durable store, relays them with
// workers workers and a send that sleeps delay, and returns the msgs/s,
// the messages acked per commit, and the share of the time spent in send
// (summed over the workers, over workers × the elapsed time).
func drain(b *testing.B, n, workers int, delay time.Duration) (rate, perCommit, sendShare float64) {
	db, err := oncekv.Open(filepath.Join(b.TempDir(), fmt.Sprintf("relay-%d.db", workers)), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	q, err := queue.Open(db, "outbox", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	for i := 0; i < n; i += 500 {
		if err := db.Update(func(tx *oncekv.Tx) error {
			for j := i; j < min(i+500, n); j++ {
				if _, err := q.EnqueueTx(tx, queue.Message{Key: fmt.Sprintf("m-%08d", j), Body: []byte("reading")}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	var sent, sending atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := relay.New(q, func(context.Context, *queue.Message) error {
		t := time.Now()
		if delay > 0 {
			time.Sleep(delay)
		}
		sending.Add(int64(time.Since(t)))
		sent.Add(1)
		return nil
	}, &relay.Options{Workers: workers})
	if err != nil {
		b.Fatal(err)
	}
	before := db.Stats().Commits
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for r.Stats().Sent < uint64(n) {
		time.Sleep(100 * time.Microsecond)
	}
	took := time.Since(start)
	commits := db.Stats().Commits - before
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return float64(n) / took.Seconds(), float64(n) / float64(commits), float64(sending.Load()) / float64(int64(workers)*int64(took))
}
