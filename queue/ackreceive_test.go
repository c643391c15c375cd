package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// ackNextFunc acks m and leases the next visible message, without
// waiting: nil when none was visible.
type ackNextFunc func(t *testing.T, e *env, m *queue.Message) (*queue.Message, error)

// ackThenPoll is the two-commit way: Ack, then Receive without the wait.
func ackThenPoll(t *testing.T, e *env, m *queue.Message) (*queue.Message, error) {
	if err := e.q.Ack(ctx, m); err != nil {
		return nil, err
	}
	ms, err := e.q.Poll(ctx, 1)
	require.NoError(t, err)
	if len(ms) == 0 {
		return nil, nil
	}
	return ms[0], nil
}

// ackAndReceiveNow is AckAndReceive under a ctx cancelled by the next
// change of the queue: the ack's commit. Whatever that commit leased is
// returned; when it leased nothing, the wait ends at once with
// ErrNotReceived.
func ackAndReceiveNow(t *testing.T, e *env, m *queue.Message) (*queue.Message, error) {
	cctx, cancel := untilChanged(e.q)
	defer cancel()
	next, err := e.q.AckAndReceive(cctx, m)
	if errors.Is(err, queue.ErrNotReceived) {
		require.ErrorIs(t, err, context.Canceled)
		require.Nil(t, next)
		return nil, nil
	}
	return next, err
}

// untilChanged returns a context cancelled at q's next change (see
// Queue.Changed), or by the function returned.
func untilChanged(q *queue.Queue) (context.Context, context.CancelFunc) {
	changed := q.Changed()
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-changed:
			cancel()
		case <-cctx.Done():
		}
	}()
	return cctx, cancel
}

// ackAndPoll is AckAndPoll.
func ackAndPoll(_ *testing.T, e *env, m *queue.Message) (*queue.Message, error) {
	return e.q.AckAndPoll(ctx, m)
}

// ackNextScenario runs one script of enqueues, receives, clock moves and
// acks-with-next through ackNext, and returns what it saw: the deliveries
// (key, attempt, token, last error, lease), the errors and the stats after
// each step.
func ackNextScenario(t *testing.T, ackNext ackNextFunc) []string {
	e := newEnv(t, &queue.Options{Visibility: time.Minute, Retry: &retry.Policy{Base: 1, Cap: 1, MaxAttempts: 2}})
	var trace []string
	seen := func(step string, m *queue.Message, err error) {
		s := step + ": "
		if m != nil {
			s += fmt.Sprintf("%s attempt %d token %d lease %v last %q", m.Key, m.Attempt, m.Token, m.LeaseUntil.Sub(t0), m.LastError)
		} else {
			s += "none"
		}
		if err != nil {
			s += fmt.Sprintf(" fenced %v", errors.Is(err, oncekv.ErrFenced))
		}
		st := e.stats(t)
		s += fmt.Sprintf(" | depth %d ready %d in flight %d delayed %d waiting %d dead %d acked %d expired %d dead-lettered %d",
			st.Depth, st.Ready, st.InFlight, st.Delayed, st.Waiting, st.Dead, st.Acked, st.Expired, st.DeadLettered)
		trace = append(trace, s)
	}
	enqueue := func(key, order string, delay time.Duration) {
		_, err := e.q.Enqueue(ctx, queue.Message{Key: key, Body: []byte(key), OrderingKey: order, Delay: delay})
		require.NoError(t, err)
	}
	step := func(name string, m *queue.Message) *queue.Message {
		next, err := ackNext(t, e, m)
		seen(name, next, err)
		return next
	}
	enqueue("a1", "a", 0)
	enqueue("a2", "a", 0)
	enqueue("b1", "", 0)
	enqueue("c1", "", 30*time.Second)
	enqueue("d1", "", 0)
	enqueue("a3", "a", 0)
	a1 := e.receiveNow(t)
	b1 := e.receiveNow(t)
	seen("received", b1, nil)
	a2 := step("ack a1", a1) // a2 let in by a1's ack, ahead of d1
	step("ack a1 again", a1) // fenced: gone
	e.time.Advance(2 * time.Minute)
	d1 := step("ack a2 after its lease ran out", a2)
	a3 := step("ack d1", d1)
	c1 := step("ack a3", a3)
	e.time.Advance(2 * time.Minute)
	step("ack c1", c1)                  // b1's lease ran out: delivered again
	step("ack b1's first delivery", b1) // fenced: delivered again since
	enqueue("e1", "", 0)
	enqueue("f1", "", 0)
	e1 := e.receiveNow(t)
	e.time.Advance(2 * time.Minute)
	f1 := step("ack e1", e1)
	step("ack f1", f1) // b1 ran out at MaxAttempts: dead-lettered, none left
	dead, err := e.q.DeadLetters(0, 10)
	require.NoError(t, err)
	for _, d := range dead {
		trace = append(trace, fmt.Sprintf("dead %s attempt %d last %q", d.Key, d.Attempt, d.LastError))
	}
	return trace
}

// TestAckAndReceiveIsAckThenReceive: one script run three times, with Ack
// then a receive, with AckAndReceive and with AckAndPoll, sees the same deliveries,
// tokens, leases, errors, dead letters and stats at every step, through
// ordering keys, a delayed message, leases that ran out and a dead letter.
func TestAckAndReceiveIsAckThenReceive(t *testing.T) {
	want := ackNextScenario(t, ackThenPoll)
	require.Equal(t, want, ackNextScenario(t, ackAndReceiveNow), "AckAndReceive")
	require.Equal(t, want, ackNextScenario(t, ackAndPoll), "AckAndPoll")
	// The script does reach what it is for.
	require.Contains(t, want[1], "ack a1: a2 attempt 1")
	require.Contains(t, want[2], "ack a1 again: none fenced true")
	require.Contains(t, want[6], `ack c1: b1 attempt 2`)
	require.Contains(t, want[7], "ack b1's first delivery: none fenced true")
	require.Contains(t, want[9], "ack f1: none")
	require.Contains(t, want[10], `dead b1 attempt 2 last "lease of attempt 2 ran out"`)
}

// TestAckAndReceiveIsOneCommit: a consumer going through a backlog with
// AckAndReceive (or AckAndPoll) pays one commit per message, where Ack then Receive pays
// two.
func TestAckAndReceiveIsOneCommit(t *testing.T) {
	e := newEnv(t, nil)
	const n = 20
	for i := range n {
		_, err := e.q.Enqueue(ctx, queue.Message{Key: fmt.Sprint("k", i), Body: []byte("b")})
		require.NoError(t, err)
	}
	m := e.receiveNow(t)
	before := e.db.Stats().Commits
	for i := 1; i < n/2; i++ {
		next, err := e.q.AckAndReceive(ctx, m)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint("k", i), next.Key)
		m = next
	}
	require.Equal(t, uint64(n/2-1), e.db.Stats().Commits-before, "one commit per message")
	before = e.db.Stats().Commits
	next, err := e.q.AckAndPoll(ctx, m)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint("k", n/2), next.Key)
	m = next
	require.Equal(t, uint64(1), e.db.Stats().Commits-before, "AckAndPoll: one commit")
	before = e.db.Stats().Commits
	for i := n/2 + 1; i < n; i++ {
		require.NoError(t, e.q.Ack(ctx, m))
		m = e.receiveNow(t)
		require.Equal(t, fmt.Sprint("k", i), m.Key)
	}
	require.Equal(t, uint64(2*(n/2-1)), e.db.Stats().Commits-before, "Ack then Receive: two")
	require.NoError(t, e.q.Ack(ctx, m))
	require.Equal(t, uint64(n), e.stats(t).Acked)
}

// TestAckAndReceiveWaitsForTheNextEnqueue: on an empty queue the ack
// commits at once, and the wait for the next message ends with the
// enqueue's commit, not a poll; and with a delayed message's time on the
// store's clock.
func TestAckAndReceiveWaitsForTheNextEnqueue(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "first", Body: []byte("b")})
	require.NoError(t, err)
	m := e.receiveNow(t)
	changed := e.q.Changed()
	type result struct {
		m   *queue.Message
		err error
	}
	got := make(chan result, 1)
	go func() {
		next, err := e.q.AckAndReceive(ctx, m)
		got <- result{next, err}
	}()
	<-changed // the ack's commit
	require.Zero(t, e.stats(t).Depth, "acked before anything was enqueued")
	select {
	case r := <-got:
		t.Fatalf("returned on an empty queue: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "second", Body: []byte("b")})
	require.NoError(t, err)
	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, "second", r.m.Key)
	require.Equal(t, 1, r.m.Attempt)

	// A delayed message: the wait is a timer on the store's clock.
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "later", Body: []byte("b"), Delay: time.Minute})
	require.NoError(t, err)
	go func() {
		next, err := e.q.AckAndReceive(ctx, r.m)
		got <- result{next, err}
	}()
	<-e.time.made // the wait's timer
	e.time.Advance(time.Minute)
	r = <-got
	require.NoError(t, r.err)
	require.Equal(t, "later", r.m.Key)
}

// TestAckAndReceiveErrors: a failed ack writes nothing and leases
// nothing; once the ack has committed, ctx done or the queue closed during
// the wait is ErrNotReceived with its cause, the message acked.
func TestAckAndReceiveErrors(t *testing.T) {
	e := newEnv(t, &queue.Options{Visibility: time.Minute})
	for _, k := range []string{"a", "b"} {
		_, err := e.q.Enqueue(ctx, queue.Message{Key: k, Body: []byte("b")})
		require.NoError(t, err)
	}
	_, err := e.q.AckAndReceive(ctx, nil)
	require.ErrorIs(t, err, queue.ErrNoMessage)

	a := e.receiveNow(t)
	e.receiveNow(t) // b
	e.time.Advance(2 * time.Minute)
	taken := e.receiveNow(t) // a's lease ran out: a again, b's too, behind it
	require.Equal(t, "a", taken.Key)
	next, err := e.q.AckAndReceive(ctx, a)
	require.ErrorIs(t, err, oncekv.ErrFenced)
	require.NotErrorIs(t, err, queue.ErrNotReceived)
	require.Nil(t, next)
	st := e.stats(t)
	require.Equal(t, []uint64{2, 1, 1, 0}, []uint64{st.Depth, st.Ready, st.InFlight, st.Acked}, "nothing written: %+v", st)

	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.q.AckAndReceive(done, taken)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, queue.ErrNotReceived)
	require.Equal(t, uint64(2), e.stats(t).Depth, "ctx done before: nothing written")

	b, err := e.q.AckAndReceive(ctx, taken)
	require.NoError(t, err)
	require.Equal(t, "b", b.Key)

	// Empty now: the ack commits, the wait ends with ctx.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = e.q.AckAndReceive(wctx, b)
	require.ErrorIs(t, err, queue.ErrNotReceived)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "acked; nothing received")
	require.Zero(t, e.stats(t).Depth)
	require.Equal(t, uint64(2), e.stats(t).Acked)

	// The queue closed during the wait.
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "c", Body: []byte("b")})
	require.NoError(t, err)
	c := e.receiveNow(t)
	changed := e.q.Changed()
	errc := make(chan error, 1)
	go func() {
		_, err := e.q.AckAndReceive(ctx, c)
		errc <- err
	}()
	<-changed
	require.NoError(t, e.q.Close())
	err = <-errc
	require.ErrorIs(t, err, queue.ErrNotReceived)
	require.ErrorIs(t, err, queue.ErrQueueClosed)
	e.q, err = queue.Open(e.db, "jobs", &queue.Options{Visibility: time.Minute, Timer: e.time.Timer})
	require.NoError(t, err)
	require.Zero(t, e.stats(t).Depth, "c acked before the close")
}

// TestAckTxAndPoll: the consumer's write, the ack and the next lease
// commit together, or none does.
func TestAckTxAndPoll(t *testing.T) {
	e := newEnv(t, nil)
	for _, k := range []string{"a", "b"} {
		_, err := e.q.Enqueue(ctx, queue.Message{Key: k, Body: []byte("b")})
		require.NoError(t, err)
	}
	a := e.receiveNow(t)
	boom := errors.New("effect failed")
	err := e.db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("done"))
		if err != nil {
			return err
		}
		if err := b.Put([]byte(a.Key), []byte("1")); err != nil {
			return err
		}
		next, err := e.q.AckTxAndPoll(tx, a)
		require.NoError(t, err)
		require.Equal(t, "b", next.Key)
		return boom
	})
	require.ErrorIs(t, err, boom)
	st := e.stats(t)
	require.Equal(t, []uint64{2, 1, 1}, []uint64{st.Depth, st.Ready, st.InFlight}, "rolled back: %+v", st)

	var next *queue.Message
	require.NoError(t, e.db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("done"))
		if err != nil {
			return err
		}
		if err := b.Put([]byte(a.Key), []byte("1")); err != nil {
			return err
		}
		next, err = e.q.AckTxAndPoll(tx, a)
		return err
	}))
	require.Equal(t, "b", next.Key)
	st = e.stats(t)
	require.Equal(t, []uint64{1, 0, 1}, []uint64{st.Depth, st.Ready, st.InFlight}, "%+v", st)
	require.NoError(t, e.db.Update(func(tx *oncekv.Tx) error {
		last, err := e.q.AckTxAndPoll(tx, next)
		require.Nil(t, last, "none left")
		return err
	}))
	require.Zero(t, e.stats(t).Depth)
	err = e.db.Update(func(tx *oncekv.Tx) error {
		_, err := e.q.AckTxAndPoll(tx, next)
		return err
	})
	require.ErrorIs(t, err, oncekv.ErrFenced)
}

// TestAckAndReceiveConcurrentConsumers: consumers looping on
// AckAndReceive while a producer enqueues (so they wait on an empty queue
// now and then) get every message once: none is held by two at once, none
// delivered twice, none lost.
func TestAckAndReceiveConcurrentConsumers(t *testing.T) {
	e := newEnv(t, &queue.Options{Visibility: time.Hour})
	const consumers, messages = 8, 400
	var (
		mu    sync.Mutex
		held  = map[string]bool{}
		count = map[string]int{}
		total int
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, consumers+1)
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := e.q.Receive(runCtx)
			for err == nil {
				mu.Lock()
				if held[m.Key] {
					mu.Unlock()
					errs <- fmt.Errorf("%s held by two consumers", m.Key)
					return
				}
				held[m.Key] = true
				count[m.Key]++
				total++
				if total == messages {
					stop()
				}
				mu.Unlock()
				time.Sleep(time.Duration(len(m.Key)%3) * 100 * time.Microsecond)
				mu.Lock()
				delete(held, m.Key)
				mu.Unlock()
				m, err = e.q.AckAndReceive(runCtx, m)
				if errors.Is(err, oncekv.ErrFenced) {
					errs <- err
					return
				}
			}
			if runCtx.Err() == nil {
				errs <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range messages {
			if _, err := e.q.Enqueue(ctx, queue.Message{Key: fmt.Sprint("m", i), Body: []byte("b")}); err != nil {
				errs <- err
				return
			}
			if i%50 == 0 {
				time.Sleep(2 * time.Millisecond) // let the consumers run dry
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, count, messages)
	for k, n := range count {
		require.Equal(t, 1, n, "%s delivered %d times", k, n)
	}
	// The last delivery of each consumer was acked by no one: the stop
	// came with it. Everything else was acked, nothing is left ready.
	st := e.stats(t)
	require.Zero(t, st.Ready, "%+v", st)
	require.Equal(t, uint64(messages), st.Acked+st.InFlight, "%+v", st)
	require.LessOrEqual(t, st.InFlight, uint64(consumers))
}
