package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// TestReadOnlyStoreGivesAReadOnlyQueue: queue.Open on a store opened
// read-only reads (Stats, Messages, DeadLetters) and refuses every write
// with oncekv.ErrReadOnly before it begins; a queue the store does not
// hold is ErrNoQueue.
func TestReadOnlyStoreGivesAReadOnlyQueue(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	enqueueNote(t, e)
	deadLetterHead(t, e)
	e.time.Advance(time.Second)
	require.NoError(t, e.q.Close())
	require.NoError(t, e.db.Close())

	db, err := oncekv.Open(e.path, &oncekv.Options{ReadOnly: true, Now: e.time.Now})
	require.NoError(t, err)
	e.db = db // closed by the env's cleanup
	q, err := queue.Open(db, "jobs", nil)
	require.NoError(t, err)
	e.q = q
	st, err := q.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.Depth, "%+v", st)
	require.Equal(t, uint64(1), st.Dead)
	require.Equal(t, uint64(1), st.Ready) // "other"
	require.Equal(t, uint64(2), st.Waiting)
	ms, err := q.Messages(0, 10)
	require.NoError(t, err)
	require.Len(t, ms, 3)
	require.Equal(t, "edit-2", ms[0].Key)
	require.True(t, ms[0].VisibleAt.IsZero(), "waiting behind the dead edit-1")
	require.Equal(t, "other", ms[2].Key)
	require.True(t, t0.Equal(ms[2].VisibleAt))
	dead, err := q.DeadLetters(0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)

	_, err = q.Enqueue(ctx, queue.Message{Key: "x", Body: []byte("b")})
	require.ErrorIs(t, err, oncekv.ErrReadOnly)
	_, err = q.Poll(ctx, 1)
	require.ErrorIs(t, err, oncekv.ErrReadOnly)
	_, err = q.Receive(ctx)
	require.ErrorIs(t, err, oncekv.ErrReadOnly)
	_, err = q.Redrive(ctx, dead[0].ID)
	require.ErrorIs(t, err, oncekv.ErrReadOnly)
	require.ErrorIs(t, q.DeleteDead(ctx, dead[0].ID), oncekv.ErrReadOnly)
	require.ErrorIs(t, q.Ack(ctx, ms[2]), oncekv.ErrReadOnly)
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		_, err := q.EnqueueTx(tx, queue.Message{Key: "x", Body: []byte("b")})
		require.ErrorIs(t, err, oncekv.ErrReadOnly)
		return nil
	}))
	_, err = queue.Open(db, "nope", nil)
	require.ErrorIs(t, err, queue.ErrNoQueue)
}

// TestViewReadsAQueueOpenWithOtherOptions: the admin handler's case: an
// app has the queue open with its options; a View reads it, with the
// app's counters, where a second Open with other options is refused.
func TestViewReadsAQueueOpenWithOtherOptions(t *testing.T) {
	e := newEnv(t, &queue.Options{Visibility: time.Hour})
	_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	_, err = queue.Open(e.db, "jobs", nil)
	require.ErrorIs(t, err, queue.ErrConflictingOptions)
	v, err := queue.NewView(e.db, "jobs")
	require.NoError(t, err)
	st, err := v.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.Depth)
	require.Equal(t, uint64(1), st.Enqueued, "the open queue's counters")
	m := e.receiveNow(t)
	got, err := v.Message(m.ID)
	require.NoError(t, err)
	require.Equal(t, m.Token, got.Token)
	require.True(t, t0.Add(time.Hour).Equal(got.VisibleAt), "a lease end")
	_, err = v.Message(99)
	require.ErrorIs(t, err, queue.ErrNotFound)
	names, err := queue.Names(e.db)
	require.NoError(t, err)
	require.Equal(t, []string{"jobs"}, names)
	_, err = queue.NewView(e.db, "other")
	require.ErrorIs(t, err, queue.ErrNoQueue)
}

// TestOldLayoutIsReadByScanAndRebuiltAtOpen: a queue written before the
// side indexes and their counts has neither; a read-only open reads its
// gauges by a scan, and the first writable Open builds them (Check agrees).
func TestOldLayoutIsReadByScanAndRebuiltAtOpen(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for key, d := range map[string]time.Duration{"a": 0, "b": 0, "c": time.Hour} {
		_, err := e.q.Enqueue(ctx, queue.Message{Key: key, Body: []byte("b"), Delay: d})
		require.NoError(t, err)
	}
	e.receiveNow(t) // one in flight
	want := e.stats(t)
	require.NoError(t, e.db.Update(func(tx *oncekv.Tx) error { // as an older build left it
		for _, b := range []string{"w", "l"} {
			require.NoError(t, tx.DeleteBucket([]byte("oncekv.queue.jobs."+b)))
		}
		s := tx.Bucket([]byte("oncekv.queue.jobs.s"))
		for _, k := range []string{"index", "sched", "leased", "layout"} {
			require.NoError(t, s.Delete([]byte(k)))
		}
		return nil
	}))
	require.NoError(t, e.q.Close())
	require.NoError(t, e.db.Close())
	for _, readOnly := range []bool{true, false} {
		db, err := oncekv.Open(e.path, &oncekv.Options{ReadOnly: readOnly, Now: e.time.Now, KeepOrphanedClaims: true})
		require.NoError(t, err)
		q, err := queue.Open(db, "jobs", &queue.Options{KeepOrphanedLeases: true})
		require.NoError(t, err)
		st, err := q.Stats()
		require.NoError(t, err)
		require.Equal(t, []uint64{want.Ready, want.InFlight, want.Delayed, want.Depth},
			[]uint64{st.Ready, st.InFlight, st.Delayed, st.Depth}, "read-only %v: %+v", readOnly, st)
		require.NoError(t, q.View().Check(func(p error) error { return p }))
		require.NoError(t, q.Close())
		require.NoError(t, db.Close())
	}
	db, err := oncekv.Open(e.path, &oncekv.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.NotNil(t, tx.Bucket([]byte("oncekv.queue.jobs.w")), "rebuilt")
		return nil
	}))
}

func TestCheckReportsADamagedCount(t *testing.T) {
	e := newEnv(t, nil)
	enqueueNote(t, e)
	require.NoError(t, e.db.Update(func(tx *oncekv.Tx) error {
		return tx.Bucket([]byte("oncekv.queue.jobs.s")).Put([]byte("index"), []byte{0, 0, 0, 0, 0, 0, 0, 9})
	}))
	var problems []error
	require.NoError(t, e.q.View().Check(func(p error) error { problems = append(problems, p); return nil }))
	require.Len(t, problems, 1)
	require.ErrorIs(t, problems[0], oncekv.ErrCorrupt)
	require.Contains(t, problems[0].Error(), `counter "index" is 9, the scan found 2`)
	require.NoError(t, e.db.Update(func(tx *oncekv.Tx) error { // leave it sound for the cleanup's check
		return tx.Bucket([]byte("oncekv.queue.jobs.s")).Put([]byte("index"), []byte{0, 0, 0, 0, 0, 0, 0, 2})
	}))
}
