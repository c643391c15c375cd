package main

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// queueStory shows the durable queue on a store of its own, with a fake
// clock: a producer's retry enqueues nothing, a worker killed mid-job is
// taken over (its late ack fenced off), a poison job is dead-lettered and
// redriven, and every job's effect is applied once.
func (d *demo) queueStory() error {
	return withScratchStore("queue", oncekv.Options{}, d.queueSteps)
}

func (d *demo) queueSteps(db *oncekv.DB, clock *fakeClock) error {
	ctx := context.Background()
	d.printf("\n%d. A durable job queue: 30s leases, 3 attempts (separate store)\n", d.step())
	q, err := queue.Open(db, "thumbnails", &queue.Options{Retry: &retry.Policy{MaxAttempts: 3, Base: time.Second, Cap: time.Second}})
	if err != nil {
		return err
	}
	defer q.Close()
	enqueue := func(key string) (uint64, error) {
		return q.Enqueue(ctx, queue.Message{Key: key, Body: []byte(key + ".jpg")})
	}
	first, err := enqueue("photo-1")
	if err != nil {
		return err
	}
	again, err := enqueue("photo-1") // the producer retries
	if err != nil {
		return err
	}
	d.printf("   photo-1 enqueued, then again by a retrying producer: ids %d and %d  %s\n", first, again, d.check(first == again))

	// work applies a job with its key, and acks it in the same transaction.
	work := func(m *queue.Message) error {
		res, err := db.Apply(ctx, oncekv.Request{Handler: "thumbnail", Key: m.Key, Payload: m.Body}, func(tx *oncekv.Tx) ([]byte, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("thumbnails"))
			if err != nil {
				return nil, err
			}
			n := readRuns(b.Get([]byte(m.Key))) + 1
			if err := b.Put([]byte(m.Key), binary.BigEndian.AppendUint64(nil, n)); err != nil {
				return nil, err
			}
			return nil, q.AckTx(tx, m)
		})
		if err == nil && res.Duplicate {
			err = q.Ack(ctx, m) // applied before: only the ack is left
		}
		return err
	}
	receive := func() (*queue.Message, error) {
		ms, err := q.Poll(ctx, 1)
		if err == nil && len(ms) == 0 {
			err = errors.New("kvdemo: no visible job")
		}
		if err != nil {
			return nil, err
		}
		return ms[0], nil
	}

	zombie, err := receive()
	if err != nil {
		return err
	}
	d.printf("   worker A takes %s (attempt %d, token %d) and is killed\n", zombie.Key, zombie.Attempt, zombie.Token)
	clock.Add(30 * time.Second)
	b, err := receive()
	if err != nil {
		return err
	}
	if err := work(b); err != nil {
		return err
	}
	late := q.Ack(ctx, zombie)
	d.printf("   30s later worker B takes %s (attempt %d, token %d) and applies it; A's late ack: fenced=%t  %s\n",
		b.Key, b.Attempt, b.Token, errors.Is(late, oncekv.ErrFenced), d.check(b.Attempt == 2 && b.Token > zombie.Token && errors.Is(late, oncekv.ErrFenced)))

	// photo-2 is poison: the thumbnailer fails on it until it is fixed.
	if _, err := enqueue("photo-2"); err != nil {
		return err
	}
	for range 3 {
		m, err := receive()
		if err != nil {
			return err
		}
		if err := q.Nack(ctx, m, errors.New("thumbnailer: unsupported colour profile")); err != nil {
			return err
		}
		clock.Add(time.Second)
	}
	dead, err := q.DeadLetters(0, 10)
	if err != nil {
		return err
	}
	if len(dead) != 1 {
		return errors.New("kvdemo: photo-2 was not dead-lettered")
	}
	ok := dead[0].Key == "photo-2" && dead[0].Attempt == 3
	d.printf("   photo-2 failed 3 times: dead-lettered with %q  %s\n", dead[0].LastError, d.check(ok))
	if _, err := q.Redrive(ctx, dead[0].ID); err != nil {
		return err
	}
	m, err := receive()
	if err != nil {
		return err
	}
	if err := work(m); err != nil {
		return err
	}
	var runs [2]uint64
	err = db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("thumbnails"))
		runs[0], runs[1] = readRuns(b.Get([]byte("photo-1"))), readRuns(b.Get([]byte("photo-2")))
		return nil
	})
	if err != nil {
		return err
	}
	st, err := q.Stats()
	if err != nil {
		return err
	}
	d.printf("   fixed and redriven with its key: photo-1 applied %d time(s), photo-2 %d, queue depth %d  %s\n",
		runs[0], runs[1], st.Depth, d.check(runs == [2]uint64{1, 1} && st.Depth == 0 && st.Dead == 0))
	return nil
}

// readRuns reads a counter of the thumbnails bucket.
func readRuns(v []byte) uint64 {
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}
