package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

var ctx = context.Background()

func TestEnqueueRetryStormEnqueuesEachKeyOnce(t *testing.T) {
	e := newEnv(t, nil)
	const keys, producers, retries = 40, 8, 3
	ids := make([][]uint64, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range retries {
				for k := range keys {
					id, err := e.q.Enqueue(ctx, queue.Message{Key: fmt.Sprint("evt-", k), Body: []byte(fmt.Sprint("body-", k))})
					if !assertNoError(t, err) {
						return
					}
					if r == 0 {
						ids[p] = append(ids[p], id)
					}
				}
			}
		}()
	}
	wg.Wait()
	for p := 1; p < producers; p++ {
		require.Equal(t, ids[0], ids[p], "every retry gets the first message's ID")
	}
	st := e.stats(t)
	require.Equal(t, uint64(keys), st.Depth)
	require.Equal(t, uint64(keys), st.Enqueued)
	require.Equal(t, uint64(keys*(producers*retries-1)), st.Duplicates)

	// Same key, other body: key reuse, nothing added.
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "evt-1", Body: []byte("other")})
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	require.Contains(t, err.Error(), `"jobs"`)
	require.Contains(t, err.Error(), `"evt-1"`)
	require.Equal(t, uint64(keys), e.stats(t).Depth)

	// Each delivered once, in enqueue order.
	for k := range keys {
		m := e.receiveNow(t)
		require.Equal(t, fmt.Sprint("evt-", k), m.Key)
		require.Equal(t, 1, m.Attempt)
		require.Equal(t, t0, m.EnqueuedAt.UTC())
		require.NoError(t, e.q.Ack(ctx, m))
	}
	e.empty(t)
}

// assertNoError is require.NoError for other goroutines (require must not
// be called off the test's goroutine).
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestEnqueueTxIsTheOutbox(t *testing.T) {
	e := newEnv(t, nil)
	// Rolled back: no message, and the key is free.
	boom := errors.New("boom")
	require.ErrorIs(t, e.db.Update(func(tx *oncekv.Tx) error {
		_, err := e.q.EnqueueTx(tx, queue.Message{Key: "k", Body: []byte("a")})
		require.NoError(t, err)
		return boom
	}), boom)
	require.Zero(t, e.stats(t).Depth)
	require.Zero(t, e.stats(t).Enqueued, "counted only on commit")

	// Inside Apply's effect: the message exists iff the effect committed.
	effect := func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return nil, err
		}
		if err := b.Put([]byte("o1"), []byte("placed")); err != nil {
			return nil, err
		}
		_, err = e.q.EnqueueTx(tx, queue.Message{Key: "order-placed/o1", Body: []byte("o1")})
		return nil, err
	}
	_, err := e.db.Apply(ctx, oncekv.Request{Handler: "place", Key: "o1"}, func(tx *oncekv.Tx) ([]byte, error) {
		if _, err := effect(tx); err != nil {
			return nil, err
		}
		return nil, errors.New("transient") // rolls back the message too
	})
	require.Error(t, err)
	require.Zero(t, e.stats(t).Depth)
	_, err = e.db.Apply(ctx, oncekv.Request{Handler: "place", Key: "o1"}, effect)
	require.NoError(t, err)
	res, err := e.db.Apply(ctx, oncekv.Request{Handler: "place", Key: "o1"}, effect)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, uint64(1), e.stats(t).Depth)
	m := e.receiveNow(t)
	require.Equal(t, "order-placed/o1", m.Key)

	// A read-only transaction cannot enqueue.
	require.NoError(t, e.db.View(func(tx *oncekv.Tx) error {
		_, err := e.q.EnqueueTx(tx, queue.Message{Key: "x"})
		require.ErrorIs(t, err, oncekv.ErrTxNotWritable)
		return nil
	}))
}

func TestZombieConsumerIsFencedAfterTakeover(t *testing.T) {
	e := newEnv(t, &queue.Options{Visibility: time.Minute})
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	zombie := e.receiveNow(t)
	require.Equal(t, t0.Add(time.Minute), zombie.LeaseUntil.UTC())
	e.empty(t) // leased: invisible

	// The lease runs out (a GC pause); another consumer takes over.
	e.time.Advance(time.Minute)
	fresh := e.receiveNow(t)
	require.Equal(t, zombie.ID, fresh.ID)
	require.Equal(t, 2, fresh.Attempt)
	require.Greater(t, fresh.Token, zombie.Token)
	require.Equal(t, uint64(1), e.stats(t).Expired)

	// The zombie's ack, nack, extend and AckTx change nothing.
	require.ErrorIs(t, e.q.Ack(ctx, zombie), oncekv.ErrFenced)
	require.ErrorIs(t, e.q.Nack(ctx, zombie, errors.New("x")), oncekv.ErrFenced)
	require.ErrorIs(t, e.q.Extend(ctx, zombie, time.Hour), oncekv.ErrFenced)
	err = e.db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("effects"))
		require.NoError(t, err)
		require.NoError(t, b.Put([]byte("k"), []byte("zombie")))
		return e.q.AckTx(tx, zombie)
	})
	require.ErrorIs(t, err, oncekv.ErrFenced)
	var fe *oncekv.FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, fresh.Token, fe.Stored)
	require.NoError(t, e.db.View(func(tx *oncekv.Tx) error {
		require.Nil(t, tx.Bucket([]byte("effects")), "the zombie's writes rolled back")
		return nil
	}))
	st := e.stats(t)
	require.Equal(t, uint64(1), st.InFlight)
	require.Zero(t, st.Acked+st.Nacked)

	// The holder extends, and acks in its own transaction.
	require.NoError(t, e.q.Extend(ctx, fresh, 5*time.Minute))
	require.Equal(t, t0.Add(6*time.Minute), fresh.LeaseUntil.UTC())
	e.time.Advance(2 * time.Minute) // past the first lease, not the extended one
	e.empty(t)
	require.NoError(t, e.db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("effects"))
		require.NoError(t, err)
		require.NoError(t, b.Put([]byte("k"), []byte("fresh")))
		return e.q.AckTx(tx, fresh)
	}))
	require.ErrorIs(t, e.q.Ack(ctx, fresh), oncekv.ErrFenced, "acked already")
	require.Zero(t, e.stats(t).Depth)
}

func TestNackBackoffHasFullJitterAndRetryAfterFloor(t *testing.T) {
	policy := &retry.Policy{Base: time.Second, Cap: time.Minute, MaxAttempts: 100, Rand: rand.NewPCG(1, 2)}
	e := newEnv(t, &queue.Options{Retry: policy})
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "k"})
	require.NoError(t, err)
	var delays []time.Duration
	for attempt := 1; attempt <= 12; attempt++ {
		m := e.receiveNow(t)
		require.Equal(t, attempt, m.Attempt)
		require.NoError(t, e.q.Nack(ctx, m, fmt.Errorf("try %d", attempt)))
		// Find when it becomes visible again, by stepping the clock.
		ceiling := min(time.Minute, time.Second<<(attempt-1))
		at := e.visibleAfter(t, ceiling)
		require.Less(t, at, ceiling, "attempt %d: full jitter below min(Cap, Base*2^(n-1))", attempt)
		delays = append(delays, at)
	}
	require.Greater(t, len(uniq(delays)), 6, "delays are jittered: %v", delays)

	// A Retry-After is a floor.
	m := e.receiveNow(t)
	require.NoError(t, e.q.Nack(ctx, m, retry.After(10*time.Minute, errors.New("503"))))
	e.time.Advance(10*time.Minute - time.Millisecond)
	e.empty(t)
	e.time.Advance(time.Millisecond)
	m = e.receiveNow(t)
	require.Equal(t, "503", m.LastError)
}

// visibleAfter steps the clock in ceiling/64 steps until the nacked message
// is visible, and returns how long that took (rounded up to a step).
func (e *env) visibleAfter(t *testing.T, ceiling time.Duration) time.Duration {
	t.Helper()
	step := ceiling / 64
	for waited := time.Duration(0); waited <= ceiling; waited += step {
		if e.stats(t).Ready == 1 {
			return waited
		}
		e.time.Advance(step)
	}
	t.Fatalf("not visible within %v", ceiling)
	return 0
}

func uniq(ds []time.Duration) map[time.Duration]bool {
	m := map[time.Duration]bool{}
	for _, d := range ds {
		m[d] = true
	}
	return m
}

func TestNackBackoffSurvivesReopen(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "k"})
	require.NoError(t, err)
	m := e.receiveNow(t)
	require.NoError(t, e.q.Nack(ctx, m, retry.After(time.Hour, errors.New("later"))))
	require.NoError(t, e.q.Close())
	require.NoError(t, e.db.Close())

	db, err := oncekv.Open(e.path, &oncekv.Options{NoSync: true, Now: e.time.Now, ExpireInterval: -1})
	require.NoError(t, err)
	e.db = db
	e.q, err = queue.Open(db, "jobs", &queue.Options{Timer: e.time.Timer})
	require.NoError(t, err)
	e.empty(t)
	require.Equal(t, uint64(1), e.stats(t).Delayed)
	e.time.Advance(time.Hour)
	m = e.receiveNow(t)
	require.Equal(t, 2, m.Attempt)
	require.Equal(t, "later", m.LastError)
}

func TestDeadLetters(t *testing.T) {
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxAttempts: 3, Base: time.Second, Cap: time.Second}})
	enqueue := func(k string) {
		_, err := e.q.Enqueue(ctx, queue.Message{Key: k, Body: []byte(k + "-body")})
		require.NoError(t, err)
	}
	enqueue("poison")

	// "poison" fails transiently MaxAttempts times.
	for attempt := 1; attempt <= 3; attempt++ {
		m := e.receiveNow(t)
		require.Equal(t, "poison", m.Key)
		require.NoError(t, e.q.Nack(ctx, m, fmt.Errorf("fail %d", attempt)))
		e.time.Advance(time.Second)
		if attempt < 3 {
			require.Zero(t, e.stats(t).Dead)
		}
	}
	// "bad" fails permanently on its first attempt.
	enqueue("bad")
	m := e.receiveNow(t)
	require.Equal(t, "bad", m.Key)
	require.NoError(t, e.q.Nack(ctx, m, oncekv.Permanent(errors.New("422 unprocessable"))))
	// "slow" lets its lease run out MaxAttempts times.
	enqueue("slow")
	for range 3 {
		m := e.receiveNow(t)
		require.Equal(t, "slow", m.Key)
		e.time.Advance(queue.DefaultVisibility)
	}
	e.empty(t)

	st := e.stats(t)
	require.Equal(t, uint64(3), st.Dead)
	require.Equal(t, uint64(3), st.DeadLettered)
	require.Zero(t, st.Depth)
	dead, err := e.q.DeadLetters(0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 3)
	got := map[string]*queue.Message{}
	for _, d := range dead {
		got[d.Key] = d
	}
	require.Equal(t, 3, got["poison"].Attempt)
	require.Equal(t, "fail 3", got["poison"].LastError)
	require.Equal(t, []byte("poison-body"), got["poison"].Body)
	require.Equal(t, 1, got["bad"].Attempt)
	require.Equal(t, "422 unprocessable", got["bad"].LastError)
	require.Contains(t, got["slow"].LastError, "lease of attempt 3 ran out")
	require.False(t, got["slow"].DeadAt.IsZero())

	// Paging, inspecting, deleting.
	page, err := e.q.DeadLetters(dead[0].ID, 1)
	require.NoError(t, err)
	require.Equal(t, []*queue.Message{dead[1]}, page)
	one, err := e.q.DeadLetter(got["bad"].ID)
	require.NoError(t, err)
	require.Equal(t, got["bad"], one)
	require.NoError(t, e.q.DeleteDead(ctx, got["slow"].ID))
	_, err = e.q.DeadLetter(got["slow"].ID)
	require.ErrorIs(t, err, queue.ErrNotFound)
	require.ErrorIs(t, e.q.DeleteDead(ctx, got["slow"].ID), queue.ErrNotFound)
	require.Equal(t, uint64(2), e.stats(t).Dead)
}

func TestRedriveIsAppliedOnce(t *testing.T) {
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxAttempts: 1}})
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "pay-1", Body: []byte("10")})
	require.NoError(t, err)
	applies := 0
	consume := func(m *queue.Message) error {
		// The consumer dedups on the message key with Apply.
		_, err := e.db.Apply(ctx, oncekv.Request{Handler: "pay", Key: m.Key, Payload: m.Body}, func(tx *oncekv.Tx) ([]byte, error) {
			applies++
			return nil, nil
		})
		return err
	}
	// Applied, but the ack is lost (the consumer crashed after Apply): the
	// lease runs out and, at MaxAttempts 1, the message is dead-lettered.
	m := e.receiveNow(t)
	require.NoError(t, consume(m))
	e.time.Advance(queue.DefaultVisibility)
	e.empty(t)
	dead, err := e.q.DeadLetters(0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)

	id, err := e.q.Redrive(ctx, dead[0].ID)
	require.NoError(t, err)
	require.Greater(t, id, dead[0].ID)
	_, err = e.q.Redrive(ctx, dead[0].ID)
	require.ErrorIs(t, err, queue.ErrNotFound)
	m = e.receiveNow(t)
	require.Equal(t, "pay-1", m.Key, "the original key")
	require.Equal(t, 1, m.Attempt)
	require.NoError(t, consume(m))
	require.NoError(t, e.q.Ack(ctx, m))
	require.Equal(t, 1, applies)
	st := e.stats(t)
	require.Equal(t, uint64(1), st.Redriven)
	require.Zero(t, st.Depth+st.Dead)

	// The enqueue mark still stands: the key is not enqueued again.
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "pay-1", Body: []byte("10")})
	require.NoError(t, err)
	require.Zero(t, e.stats(t).Depth)
}

func TestOrderingKeysInOrderUnderEightConsumers(t *testing.T) {
	e := newEnv(t, nil)
	const groups, per = 6, 15
	for i := range per {
		for g := range groups {
			_, err := e.q.Enqueue(ctx, queue.Message{Key: fmt.Sprint(g, "/", i), Body: []byte(fmt.Sprint(i)), OrderingKey: fmt.Sprint("g", g)})
			require.NoError(t, err)
		}
	}
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "free"}) // no ordering key
	require.NoError(t, err)
	st := e.stats(t)
	require.Equal(t, uint64(groups+1), st.Ready, "one head per ordering key")
	require.Equal(t, uint64(groups*(per-1)), st.Waiting)

	var mu sync.Mutex
	seen := map[string][]string{}
	inFlight := map[string]bool{}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var done sync.WaitGroup
	done.Add(groups*per + 1)
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				m, err := e.q.Receive(cctx)
				if err != nil {
					return
				}
				mu.Lock()
				if m.OrderingKey != "" && inFlight[m.OrderingKey] {
					t.Errorf("two messages of %s in flight", m.OrderingKey)
				}
				inFlight[m.OrderingKey] = true
				seen[m.OrderingKey] = append(seen[m.OrderingKey], string(m.Body))
				mu.Unlock()
				if (c+n)%5 == 0 {
					// A transient failure: the same message must come again
					// before the next of its key.
					mu.Lock()
					inFlight[m.OrderingKey] = false
					seen[m.OrderingKey] = seen[m.OrderingKey][:len(seen[m.OrderingKey])-1]
					mu.Unlock()
					assertNoError(t, e.q.Nack(ctx, m, retry.After(0, errors.New("again"))))
					continue
				}
				mu.Lock()
				inFlight[m.OrderingKey] = false
				mu.Unlock()
				if assertNoError(t, e.q.Ack(ctx, m)) {
					done.Done()
				}
			}
		}()
	}
	// Nacked messages wait out a backoff: move the clock until all are done.
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	for stop := false; !stop; {
		select {
		case <-finished:
			stop = true
		case <-time.After(time.Millisecond):
			e.time.Advance(100 * time.Millisecond)
		}
	}
	cancel()
	wg.Wait()
	for g := range groups {
		got := seen[fmt.Sprint("g", g)]
		require.Len(t, got, per)
		for i, b := range got {
			require.Equal(t, fmt.Sprint(i), b, "group %d in order: %v", g, got)
		}
	}
	require.Zero(t, e.stats(t).Depth)
}

func TestBoundedDiskRejectAndDropOldest(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		e := newEnv(t, &queue.Options{MaxMessages: 3, MaxBytes: 100})
		for i := range 3 {
			_, err := e.q.Enqueue(ctx, queue.Message{Key: fmt.Sprint(i), Body: []byte("x")})
			require.NoError(t, err)
		}
		_, err := e.q.Enqueue(ctx, queue.Message{Key: "3", Body: []byte("x")})
		require.ErrorIs(t, err, queue.ErrFull)
		require.Contains(t, err.Error(), `key "3"`)
		// A duplicate of a held key is still answered.
		id, err := e.q.Enqueue(ctx, queue.Message{Key: "0", Body: []byte("x")})
		require.NoError(t, err)
		require.Equal(t, uint64(1), id)
		// The rejected key was not marked: it can come in once there is room.
		require.NoError(t, e.q.Ack(ctx, e.receiveNow(t)))
		_, err = e.q.Enqueue(ctx, queue.Message{Key: "3", Body: []byte("x")})
		require.NoError(t, err)
		// Bytes.
		_, err = e.q.Enqueue(ctx, queue.Message{Key: "big", Body: make([]byte, 200)})
		require.ErrorIs(t, err, queue.ErrBodyTooLarge)
		require.Equal(t, uint64(3), e.stats(t).Depth)
	})
	t.Run("drop oldest", func(t *testing.T) {
		e := newEnv(t, &queue.Options{MaxMessages: 100, MaxBytes: 50, WhenFull: queue.DropOldest})
		for i := range 20 {
			_, err := e.q.Enqueue(ctx, queue.Message{Key: fmt.Sprintf("k%02d", i), Body: []byte("0123456")})
			require.NoError(t, err)
		}
		st := e.stats(t)
		require.LessOrEqual(t, st.Bytes, uint64(50))
		require.Equal(t, uint64(5), st.Depth, "50 bytes hold five messages of 10")
		require.Equal(t, uint64(15), st.Dropped)
		require.Equal(t, "k15", e.receiveNow(t).Key, "the oldest were dropped")
	})
}

func TestReceiveBlocksUntilEnqueueOrDelay(t *testing.T) {
	e := newEnv(t, nil)
	got := make(chan *queue.Message)
	go func() {
		m, err := e.q.Receive(ctx)
		assertNoError(t, err)
		got <- m
	}()
	select {
	case m := <-got:
		t.Fatalf("received %v from an empty queue", m)
	case <-time.After(20 * time.Millisecond):
	}
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "now"})
	require.NoError(t, err)
	m := <-got
	require.Equal(t, "now", m.Key, "woken by the enqueue's commit")
	require.NoError(t, e.q.Ack(ctx, m))

	// A delayed message wakes the receiver at its time, by the timer.
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "later", Delay: time.Hour})
	require.NoError(t, err)
	go func() {
		m, err := e.q.Receive(ctx)
		assertNoError(t, err)
		got <- m
	}()
	<-e.time.made // the receiver armed its timer
	e.time.Advance(time.Hour - time.Second)
	select {
	case m := <-got:
		t.Fatalf("received %v before its delay", m)
	case <-time.After(20 * time.Millisecond):
	}
	e.time.Advance(time.Second)
	require.Equal(t, "later", (<-got).Key)

	// A done ctx ends the wait.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err = e.q.Receive(cctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Closing the queue ends it too.
	go func() {
		_, err := e.q.Receive(ctx)
		got <- nil
		if !errors.Is(err, queue.ErrQueueClosed) {
			t.Errorf("got %v", err)
		}
	}()
	time.Sleep(10 * time.Millisecond) // let it wait (not for expiry: the test passes either way)
	require.NoError(t, e.q.Close())
	<-got
}

func TestReceiveBatch(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 5 {
		_, err := e.q.Enqueue(ctx, queue.Message{Key: fmt.Sprint(i), Delay: time.Duration(i) * time.Second})
		require.NoError(t, err)
	}
	e.time.Advance(2 * time.Second)
	ms, err := e.q.ReceiveBatch(ctx, 10)
	require.NoError(t, err)
	require.Len(t, ms, 3, "only those visible now")
	for i, m := range ms {
		require.Equal(t, fmt.Sprint(i), m.Key)
		if i > 0 {
			require.Greater(t, m.Token, ms[i-1].Token)
		}
	}
	_, err = e.q.ReceiveBatch(ctx, 0)
	require.ErrorIs(t, err, queue.ErrInvalidOptions)
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, &queue.Options{MaxBodySize: 10})
	for _, name := range []string{"", "a/b", "sp ace", string(make([]byte, 65))} {
		_, err := queue.Open(e.db, name, nil)
		require.ErrorIs(t, err, queue.ErrInvalidName, "%q", name)
	}
	_, err := queue.Open(e.db, "other", &queue.Options{Visibility: -1, MaxMessages: -1, Retry: &retry.Policy{Base: -1}})
	require.ErrorIs(t, err, queue.ErrInvalidOptions)
	require.ErrorIs(t, err, retry.ErrInvalidPolicy)
	require.Contains(t, err.Error(), "Visibility")
	require.Contains(t, err.Error(), "MaxMessages")

	// Opened twice: the same queue if the options agree.
	q2, err := queue.Open(e.db, "jobs", &queue.Options{MaxBodySize: 10})
	require.NoError(t, err)
	require.Same(t, e.q, q2)
	require.NoError(t, q2.Close())
	_, err = queue.Open(e.db, "jobs", &queue.Options{MaxBodySize: 11})
	require.ErrorIs(t, err, queue.ErrConflictingOptions)
	require.Contains(t, err.Error(), `"jobs"`)

	_, err = e.q.Enqueue(ctx, queue.Message{Body: []byte("x")})
	require.ErrorIs(t, err, oncekv.ErrKeyRequired)
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "k", Body: make([]byte, 11)})
	require.ErrorIs(t, err, queue.ErrBodyTooLarge)
	require.Contains(t, err.Error(), `key "k"`)
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "k", Delay: -time.Second})
	require.ErrorIs(t, err, queue.ErrInvalidDuration)
	require.ErrorIs(t, e.q.Ack(ctx, nil), queue.ErrNoMessage)
	require.Zero(t, e.stats(t).Depth, "bad input changed nothing")

	_, err = e.q.Enqueue(ctx, queue.Message{Key: "k"})
	require.NoError(t, err)
	m := e.receiveNow(t)
	require.ErrorIs(t, e.q.Extend(ctx, m, 0), queue.ErrInvalidDuration)

	// Use after Close.
	require.NoError(t, e.q.Close())
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "k2"})
	require.ErrorIs(t, err, queue.ErrQueueClosed)
	require.ErrorIs(t, e.q.Ack(ctx, m), queue.ErrQueueClosed)
	_, err = e.q.Stats()
	require.ErrorIs(t, err, queue.ErrQueueClosed)
	require.NoError(t, e.q.Close(), "twice is fine")
}

// TestReceiveWakesWhenTheClockMovedWhileItSetItsTimer: a receiver looks,
// finds a message due in 10s, and sets a timer; if an injected clock moves
// on between the look and the timer, a timer counted from then would ring
// late, past the message's time, and the receiver would sleep on while the
// message is visible (a lost wake-up, until the clock moves again).
func TestReceiveWakesWhenTheClockMovedWhileItSetItsTimer(t *testing.T) {
	for _, moved := range []time.Duration{time.Second, 4 * time.Second, 9 * time.Second} {
		t.Run(moved.String(), func(t *testing.T) {
			ft := newFakeTime()
			db, err := oncekv.Open(filepath.Join(t.TempDir(), "q.db"), &oncekv.Options{NoSync: true, Now: ft.Now, ExpireInterval: -1})
			require.NoError(t, err)
			defer db.Close()
			var once sync.Once
			timer := func(d time.Duration) (<-chan time.Time, func() bool) {
				// The clock moves on, once, just as the first timer is set.
				once.Do(func() { ft.Advance(moved) })
				return ft.Timer(d)
			}
			q, err := queue.Open(db, "jobs", &queue.Options{Timer: timer})
			require.NoError(t, err)
			defer q.Close()
			_, err = q.Enqueue(ctx, queue.Message{Key: "due", Delay: 10 * time.Second})
			require.NoError(t, err)
			got := make(chan string, 1)
			go func() {
				m, err := q.Receive(ctx)
				if err == nil {
					got <- m.Key
				}
			}()
			<-ft.made // the first timer (set while the clock moved)
			select {
			case <-ft.made: // set again from the clock's new reading
			case <-time.After(2 * time.Second): // (a receiver that keeps the late timer)
			}
			ft.Advance(10*time.Second - moved)
			select {
			case k := <-got:
				require.Equal(t, "due", k)
			case <-time.After(10 * time.Second):
				t.Fatal("the receiver slept past its message's time")
			}
		})
	}
}
