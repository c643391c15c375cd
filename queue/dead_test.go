package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// enqueueNote enqueues edits of one note, in order, and one message of
// another key.
func enqueueNote(t *testing.T, e *env) {
	t.Helper()
	for _, k := range []string{"edit-1", "edit-2", "edit-3"} {
		_, err := e.q.Enqueue(context.Background(), queue.Message{Key: k, Body: []byte(k), OrderingKey: "note-7"})
		require.NoError(t, err)
	}
	_, err := e.q.Enqueue(context.Background(), queue.Message{Key: "other", Body: []byte("o"), OrderingKey: "note-8"})
	require.NoError(t, err)
}

// deadLetterHead receives edit-1 and nacks it as permanent.
func deadLetterHead(t *testing.T, e *env) uint64 {
	t.Helper()
	m := e.receiveNow(t)
	require.Equal(t, "edit-1", m.Key)
	require.NoError(t, e.q.Nack(context.Background(), m, oncekv.Permanent(errors.New("422 invalid"))))
	return m.ID
}

// drain receives and acks until nothing is visible, and returns the keys.
func drain(t *testing.T, e *env) []string {
	t.Helper()
	var keys []string
	for {
		ms, err := e.q.Poll(context.Background(), 1)
		require.NoError(t, err)
		if len(ms) == 0 {
			return keys
		}
		keys = append(keys, ms[0].Key)
		require.NoError(t, e.q.Ack(context.Background(), ms[0]))
	}
}

func checkQueue(t *testing.T, q *queue.Queue) {
	t.Helper()
	require.NoError(t, q.View().Check(func(p error) error { return p }))
}

// TestDeadHeadHoldsItsOrderingKeyUntilRedriven: with the default
// HoldOrderingKey, edit-2 and edit-3 wait while edit-1 is a dead letter
// (other keys flow); its redrive puts it back at the head with its ID, so
// the consumer sees edit-1, edit-2, edit-3.
func TestDeadHeadHoldsItsOrderingKeyUntilRedriven(t *testing.T) {
	e := newEnv(t, nil)
	enqueueNote(t, e)
	id := deadLetterHead(t, e)
	require.Equal(t, []string{"other"}, drain(t, e), "the note's later edits are held")
	st := e.stats(t)
	require.Equal(t, uint64(2), st.Waiting, "%+v", st)
	require.Equal(t, uint64(1), st.Dead)
	keys, err := e.q.View().OrderingKeys("", 10)
	require.NoError(t, err)
	require.Equal(t, []queue.OrderingKey{{Key: "note-7", Messages: 2, Head: id, Held: true}}, keys)
	checkQueue(t, e.q)

	newID, err := e.q.Redrive(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, id, newID, "a held head keeps its ID")
	checkQueue(t, e.q)
	require.Equal(t, []string{"edit-1", "edit-2", "edit-3"}, drain(t, e))
	require.Zero(t, e.stats(t).Depth)
	checkQueue(t, e.q)
}

func TestDeleteDeadReleasesAHeldKey(t *testing.T) {
	e := newEnv(t, nil)
	enqueueNote(t, e)
	id := deadLetterHead(t, e)
	require.Equal(t, []string{"other"}, drain(t, e))
	require.NoError(t, e.q.DeleteDead(context.Background(), id))
	checkQueue(t, e.q)
	require.Equal(t, []string{"edit-2", "edit-3"}, drain(t, e))
}

// TestPassOrderingKeyLetsTheNextThrough is the behaviour before the
// option: the next edit is visible at once, and a redrive goes behind.
func TestPassOrderingKeyLetsTheNextThrough(t *testing.T) {
	e := newEnv(t, &queue.Options{DeadHead: queue.PassOrderingKey})
	enqueueNote(t, e)
	id := deadLetterHead(t, e)
	m := e.receiveNow(t)
	require.Equal(t, "edit-2", m.Key)
	newID, err := e.q.Redrive(context.Background(), id)
	require.NoError(t, err)
	require.Greater(t, newID, id)
	require.NoError(t, e.q.Ack(context.Background(), m))
	require.Equal(t, []string{"edit-3", "other", "edit-1"}, drain(t, e)) // visible at t0 alike: by ID
	checkQueue(t, e.q)
}

// A dead letter whose delivery ran out of attempts by its lease (not a
// nack) holds its key too.
func TestLeaseThatRanOutOfAttemptsHoldsTheKey(t *testing.T) {
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxAttempts: 1}})
	enqueueNote(t, e)
	m := e.receiveNow(t)
	require.Equal(t, "edit-1", m.Key)
	e.time.Advance(queue.DefaultVisibility) // the lease runs out
	require.Equal(t, []string{"other"}, drain(t, e))
	dead, err := e.q.DeadLetters(0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	_, err = e.q.Redrive(context.Background(), dead[0].ID)
	require.NoError(t, err)
	require.Equal(t, []string{"edit-1", "edit-2", "edit-3"}, drain(t, e))
}
