package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	oncekvprom "github.com/oncekv/oncekv/prometheus"
	"github.com/oncekv/oncekv/queue"
)

// driveQueue takes a queue through every state and counter: five
// messages and a duplicate; one acked, one dead-lettered and redriven,
// one in flight, one delayed, one left ready for ten seconds.
func driveQueue(t *testing.T, db *oncekv.DB, advance func(time.Duration), name string) *queue.Queue {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Open(db, name, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	for _, k := range []string{"a", "b", "c", "d"} {
		_, err := q.Enqueue(ctx, queue.Message{Key: k, Body: []byte("body-" + k)})
		require.NoError(t, err)
	}
	_, err = q.Enqueue(ctx, queue.Message{Key: "a", Body: []byte("body-a")})
	require.NoError(t, err, "a duplicate")
	_, err = q.Enqueue(ctx, queue.Message{Key: "e", Body: []byte("body-e"), Delay: time.Hour})
	require.NoError(t, err)
	receive := func(key string) *queue.Message {
		m, err := q.Receive(ctx)
		require.NoError(t, err)
		require.Equal(t, key, m.Key)
		return m
	}
	require.NoError(t, q.Ack(ctx, receive("a")))
	b := receive("b")
	require.NoError(t, q.Nack(ctx, b, oncekv.Permanent(errors.New("bad body"))))
	receive("c") // stays in flight
	_, err = q.Redrive(ctx, b.ID)
	require.NoError(t, err)
	advance(10 * time.Second)
	return q
}

func TestQueueMetrics(t *testing.T) {
	db, clock, _ := openStore(t)
	q := driveQueue(t, db, clock.Advance, "jobs")
	c := newCollector(t, db, nil)
	require.NoError(t, c.AddQueue(q))
	st, err := q.Stats()
	require.NoError(t, err)
	// What driveQueue did, so that the comparison below checks the
	// mapping, not only that the collector repeats Stats.
	require.Equal(t, queue.Stats{Depth: 4, Ready: 2, InFlight: 1, Delayed: 1, Dead: 0, Bytes: st.Bytes,
		OldestVisibleAge: 10 * time.Second, OldestAge: 10 * time.Second, Enqueued: 5, Duplicates: 1, Acked: 1, Nacked: st.Nacked,
		DeadLettered: 1, Redriven: 1}, st)

	want := fmt.Sprintf(`
# HELP oncekv_queue_acked_total Messages acknowledged.
# TYPE oncekv_queue_acked_total counter
oncekv_queue_acked_total{queue="jobs"} 1
# HELP oncekv_queue_bytes Keys and bodies held, dead letters included.
# TYPE oncekv_queue_bytes gauge
oncekv_queue_bytes{queue="jobs"} %d
# HELP oncekv_queue_dead Dead letters held, waiting for a redrive or a purge.
# TYPE oncekv_queue_dead gauge
oncekv_queue_dead{queue="jobs"} 0
# HELP oncekv_queue_dead_lettered_total Messages moved to the dead letters: too many attempts, or a permanent error.
# TYPE oncekv_queue_dead_lettered_total counter
oncekv_queue_dead_lettered_total{queue="jobs"} 1
# HELP oncekv_queue_delayed Messages not visible yet: a delay, or a nack's backoff.
# TYPE oncekv_queue_delayed gauge
oncekv_queue_delayed{queue="jobs"} 1
# HELP oncekv_queue_depth Live messages: ready, delayed, in flight and waiting for their ordering key (dead letters are not).
# TYPE oncekv_queue_depth gauge
oncekv_queue_depth{queue="jobs"} 4
# HELP oncekv_queue_dropped_total Messages dropped to make room (DropOldest).
# TYPE oncekv_queue_dropped_total counter
oncekv_queue_dropped_total{queue="jobs"} 0
# HELP oncekv_queue_duplicates_total Enqueues answered by an earlier message with the same ID, which added nothing.
# TYPE oncekv_queue_duplicates_total counter
oncekv_queue_duplicates_total{queue="jobs"} 1
# HELP oncekv_queue_enqueued_total Messages added.
# TYPE oncekv_queue_enqueued_total counter
oncekv_queue_enqueued_total{queue="jobs"} 5
# HELP oncekv_queue_expired_total Leases that ran out before an ack or a nack: a consumer died or stalled.
# TYPE oncekv_queue_expired_total counter
oncekv_queue_expired_total{queue="jobs"} 0
# HELP oncekv_queue_in_flight Messages leased to a consumer whose lease still runs.
# TYPE oncekv_queue_in_flight gauge
oncekv_queue_in_flight{queue="jobs"} 1
# HELP oncekv_queue_nacked_total Messages given back for a retry after a backoff.
# TYPE oncekv_queue_nacked_total counter
oncekv_queue_nacked_total{queue="jobs"} %d
# HELP oncekv_queue_oldest_visible_age_seconds How long the oldest visible message has been visible: consumer lag. 0 when none is.
# TYPE oncekv_queue_oldest_visible_age_seconds gauge
# HELP oncekv_queue_oldest_age_seconds How long ago the oldest live message (waiting or in flight) was enqueued: how far behind a relay is. 0 when the queue is empty.
# TYPE oncekv_queue_oldest_age_seconds gauge
oncekv_queue_oldest_age_seconds{queue="jobs"} 10
oncekv_queue_oldest_visible_age_seconds{queue="jobs"} 10
# HELP oncekv_queue_ready Messages visible now, leases that ran out included.
# TYPE oncekv_queue_ready gauge
oncekv_queue_ready{queue="jobs"} 2
# HELP oncekv_queue_redriven_total Dead letters moved back to the queue.
# TYPE oncekv_queue_redriven_total counter
oncekv_queue_redriven_total{queue="jobs"} 1
# HELP oncekv_queue_waiting Messages behind an earlier message of their ordering key.
# TYPE oncekv_queue_waiting gauge
oncekv_queue_waiting{queue="jobs"} 0
`, st.Bytes, st.Nacked)
	var names []string
	for _, line := range strings.Split(want, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names = append(names, strings.Fields(name)[0])
		}
	}
	require.Len(t, names, 17)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), names...))

	// The lease of the message in flight runs out (30 s by default).
	clock.Advance(time.Minute)
	require.Zero(t, gather(t, c, "oncekv_queue_in_flight", map[string]string{"queue": "jobs"}))
	require.Equal(t, 3.0, gather(t, c, "oncekv_queue_ready", map[string]string{"queue": "jobs"}))
	requireLintClean(t, c)
}

func TestAddQueue(t *testing.T) {
	db, clock, _ := openStore(t)
	c := newCollector(t, db, nil)
	require.Zero(t, testutil.CollectAndCount(c, "oncekv_queue_depth"), "no queue added, no queue series")

	jobs := driveQueue(t, db, clock.Advance, "jobs")
	mail := driveQueue(t, db, clock.Advance, "mail")
	require.NoError(t, c.AddQueue(jobs))
	require.NoError(t, c.AddQueue(mail))
	require.Equal(t, 2, testutil.CollectAndCount(c, "oncekv_queue_depth"))

	again, err := queue.Open(db, "jobs", nil)
	require.NoError(t, err)
	err = c.AddQueue(again)
	require.ErrorIs(t, err, oncekvprom.ErrQueueAdded)
	require.Contains(t, err.Error(), `"jobs"`)
	require.NoError(t, again.Close())
	require.ErrorIs(t, c.AddQueue(nil), oncekvprom.ErrInvalidOptions)
	require.Equal(t, 2, testutil.CollectAndCount(c, "oncekv_queue_depth"), "refused queues add nothing")

	// A closed queue leaves the scrape, which still succeeds.
	require.NoError(t, mail.Close())
	require.Equal(t, 1, testutil.CollectAndCount(c, "oncekv_queue_depth"))
	require.Equal(t, 4.0, gather(t, c, "oncekv_queue_depth", map[string]string{"queue": "jobs"}))
}

func TestClockJumpsMetric(t *testing.T) {
	db, clock, _ := openStore(t)
	c := newCollector(t, db, nil)
	require.Zero(t, gather(t, c, "oncekv_clock_jumps_total", nil))
	// A forward jump over MaxClockJump counts once it is confirmed by
	// readings in a row (each write reads the clock).
	clock.Advance(48 * time.Hour)
	for i := range 4 {
		require.NoError(t, apply(db, "h", fmt.Sprint("k", i), "p", nil))
	}
	require.Equal(t, float64(db.Stats().ClockJumps), gather(t, c, "oncekv_clock_jumps_total", nil))
	require.Equal(t, 1.0, gather(t, c, "oncekv_clock_jumps_total", nil))
}
