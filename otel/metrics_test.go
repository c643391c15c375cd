package otel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/oncekv/oncekv"
	oncekvotel "github.com/oncekv/oncekv/otel"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

func apply(db *oncekv.DB, handler, key, payload string, effect func(*oncekv.Tx) ([]byte, error)) error {
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: handler, Key: key, Payload: []byte(payload)}, effect)
	return err
}

// drive takes a store through every result of oncekv.apply, in two
// handlers: orders (3 applied, 2 duplicates, a key reuse, an effect
// error) and mail (a failure recorded and replayed, a conflict with a
// claim), and one invalid request.
func drive(t *testing.T, db *oncekv.DB) {
	t.Helper()
	fail := func(err error) func(*oncekv.Tx) ([]byte, error) {
		return func(*oncekv.Tx) ([]byte, error) { return nil, err }
	}
	c, err := db.Claim(context.Background(), oncekv.Request{Handler: "mail", Key: "held", Payload: []byte("p")}, time.Minute)
	require.NoError(t, err)
	steps := []struct {
		handler, key, payload string
		effect                func(*oncekv.Tx) ([]byte, error)
		want                  error
	}{
		{"orders", "o0", "p", nil, nil}, {"orders", "o1", "p", nil, nil}, {"orders", "o2", "p", nil, nil},
		{"orders", "o0", "p", nil, nil}, {"orders", "o1", "p", nil, nil},
		{"orders", "o2", "other", nil, oncekv.ErrKeyReuse},
		{"orders", "o3", "p", fail(errTransient), errTransient},
		{"mail", "m1", "p", fail(oncekv.Permanent(errors.New("card declined"))), oncekv.ErrFailed},
		{"mail", "m1", "p", nil, oncekv.ErrFailed},
		{"mail", "held", "p", nil, oncekv.ErrInProgress},
		{"mail", "", "p", nil, oncekv.ErrKeyRequired},
	}
	for i, st := range steps {
		err := apply(db, st.handler, st.key, st.payload, st.effect)
		if st.want == nil {
			require.NoError(t, err, "step %d", i)
		} else {
			require.ErrorIs(t, err, st.want, "step %d", i)
		}
	}
	require.NoError(t, c.Fail(context.Background(), nil))
}

var errTransient = errors.New("gateway down")

func TestObserveDBReportsTheStoresStats(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	drive(t, s.db)
	s.clock.Advance(10 * time.Minute)
	reg, err := r.tel.ObserveDB(s.db, attribute.String("store", "main"))
	require.NoError(t, err)
	rm := r.collect(t)
	st := s.db.Stats()

	orders := []attribute.KeyValue{attribute.String("handler", "orders"), attribute.String("store", "main")}
	mail := []attribute.KeyValue{attribute.String("handler", "mail")}
	require.Equal(t, 2.0, metricValue(t, rm, "oncekv.duplicates_suppressed", orders...), "duplicates suppressed per handler")
	require.Equal(t, 1.0, metricValue(t, rm, "oncekv.idempotency_key_conflicts", mail...), "key conflicts")
	for result, want := range map[string]float64{"applied": 3, "duplicate": 2, "key_reuse": 1, "effect_error": 1} {
		require.Equal(t, want, metricValue(t, rm, "oncekv.apply", append(orders, attribute.String("result", result))...), result)
	}
	for result, want := range map[string]float64{"failed": 1, "failed_replayed": 1, "in_progress": 1} {
		require.Equal(t, want, metricValue(t, rm, "oncekv.apply", append(mail, attribute.String("result", result))...), result)
	}
	require.Equal(t, 1.0, metricValue(t, rm, "oncekv.invalid_requests"))
	require.Equal(t, float64(st.LiveMarks), metricValue(t, rm, "oncekv.live_marks"), "the dedup table's size")
	require.Equal(t, 5.0, float64(st.LiveMarks), "o0-o2, m1 failed, held released")
	require.Equal(t, st.OldestMarkAge.Seconds(), metricValue(t, rm, "oncekv.oldest_mark.age"), "its age")
	require.GreaterOrEqual(t, metricValue(t, rm, "oncekv.oldest_mark.age"), 600.0)
	require.Equal(t, float64(st.File.Size), metricValue(t, rm, "oncekv.db.size"))
	require.Equal(t, float64(st.Commits), metricValue(t, rm, "oncekv.commits"))
	require.Equal(t, float64(len(st.Windows)), metricValue(t, rm, "oncekv.windows"))

	require.NoError(t, apply(s.db, "orders", "o0", "p", nil))
	require.Equal(t, 3.0, metricValue(t, r.collect(t), "oncekv.duplicates_suppressed", orders...), "read afresh at each collection")

	require.NoError(t, reg.Unregister())
	_, ok := value(r.collect(t), "oncekv.live_marks")
	require.False(t, ok, "nothing once unregistered")
	_, err = r.tel.ObserveDB(nil)
	require.ErrorIs(t, err, oncekvotel.ErrNilArgument)
	_, err = r.tel.ObserveQueue(nil)
	require.ErrorIs(t, err, oncekvotel.ErrNilArgument)
	_, err = r.tel.ObserveRelay("q", nil)
	require.ErrorIs(t, err, oncekvotel.ErrNilArgument)
}

func TestObserveDBCapsHandlers(t *testing.T) {
	r := newRig(t, &oncekvotel.Options{MaxHandlers: 2})
	s := openStore(t)
	for _, h := range []string{"c", "a", "b", oncekvotel.OtherHandler, "d"} {
		require.NoError(t, apply(s.db, h, "k", "p", nil))
	}
	_, err := r.tel.ObserveDB(s.db)
	require.NoError(t, err)
	rm := r.collect(t)
	applied := func(h string) float64 {
		return metricValue(t, rm, "oncekv.apply", attribute.String("handler", h), attribute.String("result", "applied"))
	}
	require.Equal(t, 1.0, applied("a"))
	require.Equal(t, 1.0, applied("b"))
	require.Equal(t, 3.0, applied(oncekvotel.OtherHandler), `"_other" itself, "c" and "d" past the cap`)
	_, ok := value(rm, "oncekv.apply", attribute.String("handler", "c"))
	require.False(t, ok)

	require.NoError(t, apply(s.db, "0-first-by-name", "k", "p", nil))
	rm = r.collect(t)
	_, ok = value(rm, "oncekv.apply", attribute.String("handler", "0-first-by-name"))
	require.False(t, ok, "once chosen, the handlers keep their series")
	require.Equal(t, 1.0, applied("a"))
}

func TestObserveQueueReportsDeadLetterLag(t *testing.T) {
	r := newRig(t, &oncekvotel.Options{MaxDeadLetterScan: 20})
	s := openStore(t)
	q := s.queue(t, "jobs", nil)
	ctx := context.Background()
	_, err := r.tel.ObserveQueue(q)
	require.NoError(t, err)
	rm := r.collect(t)
	require.Equal(t, 0.0, metricValue(t, rm, "oncekv.queue.oldest_dead_letter.age", attribute.String("queue", "jobs")), "no dead letters")

	// 40 messages; the one with ID 30 dies first, 10 minutes before the
	// others: past a scan of 20, only a lower bound is seen.
	for i := range 40 {
		_, err := q.Enqueue(ctx, queue.Message{Key: fmt.Sprint("m", i), Body: []byte("x")})
		require.NoError(t, err)
	}
	bury := func(ids ...uint64) {
		want := map[uint64]bool{}
		for _, id := range ids {
			want[id] = true
		}
		ms, err := q.Poll(ctx, 40)
		require.NoError(t, err)
		for _, m := range ms {
			if want[m.ID] {
				require.NoError(t, q.Nack(ctx, m, retry.Permanent(errors.New("poison"))))
			} else {
				require.NoError(t, q.Defer(ctx, m, 0))
			}
		}
	}
	bury(30)
	s.clock.Advance(10 * time.Minute)
	bury(1, 2, 3, 31)
	s.clock.Advance(time.Minute)

	rm = r.collect(t)
	jobs := attribute.String("queue", "jobs")
	require.Equal(t, 660.0, metricValue(t, rm, "oncekv.queue.oldest_dead_letter.age", jobs), "the oldest death, by DeadAt")
	require.Equal(t, 5.0, metricValue(t, rm, "oncekv.queue.dead", jobs))
	require.Equal(t, 35.0, metricValue(t, rm, "oncekv.queue.depth", jobs))
	require.Equal(t, 5.0, metricValue(t, rm, "oncekv.queue.dead_lettered", jobs))
	require.Equal(t, 40.0, metricValue(t, rm, "oncekv.queue.enqueued", jobs))

	small := newRig(t, &oncekvotel.Options{MaxDeadLetterScan: 3})
	_, err = small.tel.ObserveQueue(q)
	require.NoError(t, err)
	require.Equal(t, 60.0, metricValue(t, small.collect(t), "oncekv.queue.oldest_dead_letter.age", jobs),
		"a scan of 3 sees IDs 1-3 only: a lower bound, as documented")

	require.NoError(t, q.Close())
	_, ok := value(r.collect(t), "oncekv.queue.depth", jobs)
	require.False(t, ok, "a closed queue reports nothing")
}

func TestObserveRelayReportsTheRetryRatio(t *testing.T) {
	clock := &fakeNow{at: t0}
	r := newRig(t, &oncekvotel.Options{Now: clock.now, RetryRatioWindow: time.Minute})
	s := openStore(t)
	q := s.queue(t, "outbox", &queue.Options{Retry: &retry.Policy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: -1}})
	ctx := context.Background()

	// Every message fails its first send and succeeds its second: one
	// retry per two sends.
	var mu sync.Mutex
	fails := map[string]bool{}
	send := func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if !fails[m.Key] {
			fails[m.Key] = true
			return errors.New("503")
		}
		return nil
	}
	rl, err := relay.New(q, send, &relay.Options{Now: s.clock.Now, Workers: 1})
	require.NoError(t, err)
	_, err = r.tel.ObserveRelay("outbox", rl)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rl.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	deliver := func(keys ...string) {
		before := rl.Stats().Sent
		for _, k := range keys {
			_, err := q.Enqueue(ctx, queue.Message{Key: k, Body: []byte("x")})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			s.clock.Advance(time.Millisecond) // the nacks' backoff
			return rl.Stats().Sent == before+uint64(len(keys))
		}, 20*time.Second, time.Millisecond)
	}
	deliver("a", "b")
	rm := r.collect(t)
	q0 := attribute.String("queue", "outbox")
	require.Equal(t, 0.5, metricValue(t, rm, "oncekv.relay.retry_ratio", q0))
	require.Equal(t, 2.0, metricValue(t, rm, "oncekv.relay.retried", q0))
	require.Equal(t, 2.0, metricValue(t, rm, "oncekv.relay.failed", q0))
	require.Equal(t, 2.0, metricValue(t, rm, "oncekv.relay.sent", q0))

	// Past the window, only the sends since the last collection count:
	// three messages that succeed at once.
	clock.advance(2 * time.Minute)
	mu.Lock()
	fails["c"], fails["d"], fails["e"] = true, true, true
	mu.Unlock()
	deliver("c", "d", "e")
	require.Equal(t, 0.0, metricValue(t, r.collect(t), "oncekv.relay.retry_ratio", q0),
		"the earlier retries left the trailing window")
	clock.advance(10 * time.Second)
	deliver("f")
	require.InDelta(t, 1.0/5, metricValue(t, r.collect(t), "oncekv.relay.retry_ratio", q0), 1e-9,
		"one retry in the five sends since the collection a window ago")
}

type fakeNow struct{ at time.Time }

func (f *fakeNow) now() time.Time          { return f.at }
func (f *fakeNow) advance(d time.Duration) { f.at = f.at.Add(d) }
