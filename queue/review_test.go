package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// waitErr returns what done delivers, failing the test if nothing comes.
func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		require.FailNow(t, "a blocked Receive did not return")
		return nil
	}
}

// Close wakes every blocked Receive with ErrQueueClosed; cancelling ctx
// wakes one with ctx's error.
func TestCloseAndCancelWakeBlockedReceivers(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() { _, err := e.q.Receive(ctx); cancelled <- err }()
	done := make(chan error, 8)
	for range 8 {
		go func() { _, err := e.q.Receive(context.Background()); done <- err }()
	}
	time.Sleep(20 * time.Millisecond) // let them block; passes either way if they had not
	cancel()
	require.ErrorIs(t, waitErr(t, cancelled), context.Canceled)
	require.NoError(t, e.q.Close())
	for range 8 {
		require.ErrorIs(t, waitErr(t, done), queue.ErrQueueClosed)
	}
}

// An acked message cannot be acked or nacked again, and its key stays a
// duplicate for the dedup window.
func TestAckedMessageIsFencedAndItsKeyADuplicate(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	m := e.leaseOne(t)
	require.NoError(t, e.q.Ack(ctx, m))
	require.ErrorIs(t, e.q.Ack(ctx, m), oncekv.ErrFenced)
	require.ErrorIs(t, e.q.Nack(ctx, m, nil), oncekv.ErrFenced)
	id, err := e.q.Enqueue(ctx, queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	require.Equal(t, m.ID, id)
	e.empty(t)
}

// Nack's doc: a cause that is ctx's own error while ctx is done releases
// the message at once, as it was.
func TestNackWithItsOwnCancelledContextReleasesTheMessage(t *testing.T) {
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxAttempts: 1}})
	m := e.leaseOne(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, e.q.Nack(ctx, m, fmt.Errorf("send: %w", ctx.Err())))
	st := e.stats(t)
	require.EqualValues(t, 1, st.Ready, "released at once: %+v", st)
	require.Zero(t, st.Dead, "not dead-lettered, though it was the last attempt: %+v", st)
	m2 := e.receiveNow(t)
	require.Equal(t, m.Key, m2.Key)
	require.Empty(t, m2.LastError)

	// Another cause with a done ctx: ctx's error, nothing changed.
	err := e.q.Nack(ctx, m2, errors.New("boom"))
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 1, e.stats(t).InFlight)
}

type panicky struct{}

func (panicky) Error() string             { return "panicky" }
func (panicky) RetryAfter() time.Duration { panic("user panic") }

// A cause whose method panics inside Nack's transaction panics in the
// caller, and leaves the store and the lease usable.
func TestNackPanicInCauseIsTheCallersAndReleasesTheStore(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	m := e.leaseOne(t)
	require.PanicsWithValue(t, "user panic", func() { _ = e.q.Nack(ctx, m, panicky{}) })
	_, err := e.q.Enqueue(ctx, queue.Message{Key: "k2", Body: []byte("b")})
	require.NoError(t, err)
	require.NoError(t, e.q.Ack(ctx, m), "the panicking nack changed nothing")
}

func TestOpenNilDBIsAnError(t *testing.T) {
	q, err := queue.Open(nil, "x", nil)
	require.ErrorIs(t, err, queue.ErrNilDB)
	require.Contains(t, err.Error(), `"x"`)
	require.Nil(t, q)
}

// Keys too large for the store are refused with its typed error; any
// bytes otherwise (invalid UTF-8, NUL) travel unchanged.
func TestKeysTooLargeRefusedOddBytesKept(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	_, err := e.q.Enqueue(ctx, queue.Message{Key: string(make([]byte, 100_000)), Body: []byte("b")})
	require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
	_, err = e.q.Enqueue(ctx, queue.Message{Key: "o", Body: []byte("b"), OrderingKey: string(make([]byte, 40_000))})
	require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
	require.Zero(t, e.stats(t).Depth)
	for _, k := range []string{"\xff\xfe", "a\x00b"} {
		_, err := e.q.Enqueue(ctx, queue.Message{Key: k, Body: []byte("b")})
		require.NoError(t, err)
		m := e.receiveNow(t)
		require.Equal(t, k, m.Key)
		require.NoError(t, e.q.Ack(ctx, m))
	}
}

// Producers and consumers that nack, ack in their own transaction and
// defer at random, on a full DropOldest queue with ordering keys: no two
// consumers hold one message at once, each key's effect is applied at
// most once, and the gauges add up.
func TestConcurrentConsumersNeverShareALease(t *testing.T) {
	e := newEnv(t, &queue.Options{MaxMessages: 50, WhenFull: queue.DropOldest})
	ctx := context.Background()
	var (
		held  sync.Map
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked = map[string]int{}
	)
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := fmt.Sprintf("p%d-%d", p, i)
				_, err := e.q.Enqueue(ctx, queue.Message{Key: k, Body: []byte(k), OrderingKey: fmt.Sprint(i % 3)})
				require.NoError(t, err)
			}
		}()
	}
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for range 150 {
				ms, err := e.q.Poll(ctx, 1+rng.IntN(3))
				require.NoError(t, err)
				for _, m := range ms {
					_, loaded := held.LoadOrStore(m.ID, true)
					require.False(t, loaded, "message %d delivered twice at once", m.ID)
					switch rng.IntN(3) {
					case 0:
						held.Delete(m.ID) // visible again once nacked
						err = e.q.Nack(ctx, m, errors.New("again"))
					case 1:
						err = e.db.Update(func(tx *oncekv.Tx) error { return e.q.AckTx(tx, m) })
						held.Delete(m.ID)
						if err == nil {
							mu.Lock()
							acked[m.Key]++
							mu.Unlock()
						}
					default:
						held.Delete(m.ID)
						err = e.q.Defer(ctx, m, 0)
					}
					if !errors.Is(err, oncekv.ErrFenced) { // dropped meanwhile
						require.NoError(t, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for k, n := range acked {
		require.Equal(t, 1, n, k)
	}
	st := e.stats(t)
	require.EqualValues(t, len(acked), st.Acked, "%+v", st)
	require.LessOrEqual(t, st.Depth+st.Dead, uint64(50), "%+v", st)
	require.Equal(t, st.Depth, st.Ready+st.InFlight+st.Delayed+st.Waiting, "%+v", st)
	require.EqualValues(t, 800, st.Enqueued)
}

// A message handed to another queue of the same store (same ID, key and
// token, as two fresh queues give) is fenced there, not acked.
func TestMessageOfAnotherQueueIsFenced(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	other, err := queue.Open(e.db, "other", &queue.Options{Timer: e.time.Timer})
	require.NoError(t, err)
	defer func() { require.NoError(t, other.Close()) }()
	m := e.leaseOne(t)
	_, err = other.Enqueue(ctx, queue.Message{Key: "k", Body: []byte("b")})
	require.NoError(t, err)
	om, err := other.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, []any{m.ID, m.Key, m.Token}, []any{om.ID, om.Key, om.Token})

	require.ErrorIs(t, other.Ack(ctx, m), oncekv.ErrFenced)
	require.ErrorIs(t, other.Nack(ctx, m, nil), oncekv.ErrFenced)
	require.ErrorIs(t, other.Extend(ctx, m, time.Minute), oncekv.ErrFenced)
	require.ErrorIs(t, e.db.Update(func(tx *oncekv.Tx) error { return other.AckTx(tx, m) }), oncekv.ErrFenced)
	st, err := other.Stats()
	require.NoError(t, err)
	require.EqualValues(t, 1, st.InFlight, "other's message untouched")
	require.NoError(t, other.Ack(ctx, om))
	require.NoError(t, e.q.Ack(ctx, m))
}

// Options.Retry's doc: its Budget is not used by the queue (the relay
// asks it before each retry); a Nack must not spend from it.
func TestNackDoesNotSpendThePolicysBudget(t *testing.T) {
	b, err := retry.NewBudget(&retry.BudgetOptions{Now: newFakeTime().Now})
	require.NoError(t, err)
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{Budget: b}})
	m := e.leaseOne(t)
	require.NoError(t, e.q.Nack(context.Background(), m, errors.New("again")))
	st := b.Stats()
	require.Zero(t, st.Withdrawals+st.Refused, "%+v", st)
}

// EnqueueTx in a read transaction is ErrTxNotWritable; twice in one write
// transaction with one key, the second is the first's duplicate.
func TestEnqueueTxReadOnlyAndTwiceInOneTx(t *testing.T) {
	e := newEnv(t, nil)
	m := queue.Message{Key: "k", Body: []byte("b")}
	err := e.db.View(func(tx *oncekv.Tx) error { _, err := e.q.EnqueueTx(tx, m); return err })
	require.ErrorIs(t, err, oncekv.ErrTxNotWritable)
	var a, b uint64
	require.NoError(t, e.db.Update(func(tx *oncekv.Tx) (err error) {
		if a, err = e.q.EnqueueTx(tx, m); err != nil {
			return err
		}
		b, err = e.q.EnqueueTx(tx, m)
		return err
	}))
	require.Equal(t, a, b)
	require.EqualValues(t, 1, e.stats(t).Depth)
	err = e.db.Update(func(tx *oncekv.Tx) error {
		_, err := e.q.EnqueueTx(tx, queue.Message{Key: "k", Body: []byte("other")})
		return err
	})
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
}

// Closing the store (not the queue) wakes every blocked Receive with
// oncekv.ErrClosed: before DB.Done existed they stayed blocked forever on
// a store that could no longer wake them.
func TestClosingTheStoreWakesBlockedReceivers(t *testing.T) {
	e := newEnv(t, nil)
	done := make(chan error, 4)
	for range 4 {
		go func() { _, err := e.q.Receive(context.Background()); done <- err }()
	}
	time.Sleep(20 * time.Millisecond) // let them block; passes either way if they had not
	require.NoError(t, e.db.Close())
	for range 4 {
		require.ErrorIs(t, waitErr(t, done), oncekv.ErrClosed)
	}
	select {
	case <-e.db.Done():
	default:
		require.FailNow(t, "Done is not closed after Close")
	}
}
