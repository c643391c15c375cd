package mqtt_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/examples/mqtt"
	"github.com/oncekv/oncekv/retry"
)

// fakeMessage is a paho.Message whose Ack calls ack, once.
type fakeMessage struct {
	payload []byte
	id      uint16
	once    sync.Once
	ack     func()
}

func (m *fakeMessage) Duplicate() bool   { return false }
func (m *fakeMessage) Qos() byte         { return 1 }
func (m *fakeMessage) Retained() bool    { return false }
func (m *fakeMessage) Topic() string     { return "readings" }
func (m *fakeMessage) MessageID() uint16 { return m.id }
func (m *fakeMessage) Payload() []byte   { return m.payload }
func (m *fakeMessage) Ack()              { m.once.Do(m.ack) }

var _ paho.Message = (*fakeMessage)(nil)

// acks records, from outside the Pipeline, each ack: its message's index
// and whether the store already held the message's effect, committed, when
// the ack was sent (a read transaction sees only what committed).
type acks struct {
	t  *testing.T
	db *oncekv.DB
	mu sync.Mutex
	// order holds the indexes of the messages acked, in ack order.
	order []int
}

// message returns message i with payload, whose Ack checks that key (if
// not "") was applied exactly once in a commit before the ack.
func (a *acks) message(i int, key string, payload []byte) *fakeMessage {
	return &fakeMessage{payload: payload, id: uint16(i%65535 + 1), ack: func() {
		if key != "" {
			applied, err := reading.Applied(a.db)
			assert.NoError(a.t, err)
			assert.Equal(a.t, uint64(1), applied[key], "message %d (%s) acked before its effect committed", i, key)
		}
		a.mu.Lock()
		a.order = append(a.order, i)
		a.mu.Unlock()
	}}
}

func (a *acks) acked() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.order...)
}

// TestPipelineAcksOnlyAfterCommitAndSharesCommits hands a Pipeline 200
// messages, one at a time as paho's delivery goroutine does, while an
// Update holds the store's write lock: every Handle returns, no message is
// acked. Once the Update ends, the 200 go through a few commits (the
// store's Stats count them), and each ack comes after its effect committed
// (the Ack reads the store), in delivery order; a redelivered duplicate is
// acked as a duplicate, a bad payload and a poison reading acked as no
// retry can fix them.
func TestPipelineAcksOnlyAfterCommitAndSharesCommits(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "consumer.db"), nil) // durable: one fsync per commit
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	a := &acks{t: t, db: db}
	var mu sync.Mutex
	results := map[int]string{}
	idx := 0 // the message OnResult reports next: OnResult runs in delivery order
	p, err := mqtt.NewPipeline(ctx, db, mqtt.ConsumerOptions{
		OnResult: func(key string, res oncekv.Result, err error, acked bool) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && acked:
				results[idx] = "failed"
			case err != nil:
				results[idx] = "unacked: " + err.Error()
			case res.Duplicate:
				results[idx] = "dup"
			default:
				results[idx] = "applied"
			}
			idx++
		},
	})
	require.NoError(t, err)

	locked, release := make(chan struct{}), make(chan struct{})
	updated := make(chan error, 1)
	go func() {
		updated <- db.Update(func(*oncekv.Tx) error {
			close(locked)
			<-release
			return nil
		})
	}()
	<-locked
	before := db.Stats()

	const n = 200
	var want []string
	for i := range n {
		var m *fakeMessage
		switch {
		case i == 50:
			m = a.message(i, "", []byte("{not a reading"))
			want = append(want, "failed")
		case i == 60:
			r := reading.Reading{Key: "r-poison", Poison: true}
			m = a.message(i, "", reading.Encode(r))
			want = append(want, "failed")
		case i%10 == 9: // a redelivery of the message before it
			r := reading.Reading{Key: fmt.Sprintf("r-%03d", i-1), Value: float64(i - 1)}
			m = a.message(i, r.Key, reading.Encode(r))
			want = append(want, "dup")
		default:
			r := reading.Reading{Key: fmt.Sprintf("r-%03d", i), Value: float64(i)}
			m = a.message(i, r.Key, reading.Encode(r))
			want = append(want, "applied")
		}
		p.Handle(nil, m)
	}
	time.Sleep(50 * time.Millisecond) // time enough for an ack that does not wait for the commit
	require.Empty(t, a.acked(), "no message is acked while its commit waits for the write lock")

	close(release)
	require.NoError(t, <-updated)
	require.NoError(t, p.Close())
	order := a.acked()
	require.Len(t, order, n, "every message acked")
	for i, j := range order {
		require.Equal(t, i, j, "acks in delivery order")
	}
	mu.Lock()
	for i, w := range want {
		require.Equal(t, w, results[i], "message %d", i)
	}
	mu.Unlock()

	st := db.Stats().Sub(before)
	h := st.CommitHistograms
	require.Positive(t, h.MarkCommits)
	t.Logf("%d messages, %d commits wrote marks, %d marks: %.1f per commit", n, h.MarkCommits, h.RequestSum, float64(h.RequestSum)/float64(h.MarkCommits))
	require.LessOrEqual(t, h.MarkCommits, uint64(n/20), "one commit per message: the messages do not share commits")
	applied, err := reading.Applied(db)
	require.NoError(t, err)
	for k, c := range applied {
		require.Equal(t, uint64(1), c, "key %s applied %d times", k, c)
	}
}

// TestPipelineRetriesInProgressAndAcksAfterItsCommit hands a Pipeline a
// message whose key another worker's claim holds, then more messages: the
// held one is retried with the Retry backoff and acked only once the claim
// is abandoned and its own retry, not before the claim's lease ends,
// committed; the messages behind it are committed meanwhile, and acked
// after it, in delivery order.
func TestPipelineRetriesInProgressAndAcksAfterItsCommit(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "consumer.db"), nil)
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	held := reading.Reading{Key: "r-held", Value: 1}
	claim, err := db.Claim(ctx, reading.Request("mqtt-readings", reading.Encode(held), held), 500*time.Millisecond)
	require.NoError(t, err)
	require.NotNil(t, claim)

	a := &acks{t: t, db: db}
	var mu sync.Mutex
	var attempts []error
	p, err := mqtt.NewPipeline(ctx, db, mqtt.ConsumerOptions{
		Retry: &retry.Policy{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: -1},
		OnResult: func(key string, _ oncekv.Result, err error, acked bool) {
			mu.Lock()
			defer mu.Unlock()
			if key == held.Key {
				attempts = append(attempts, err)
			}
		},
	})
	require.NoError(t, err)
	p.Handle(nil, a.message(0, held.Key, reading.Encode(held)))
	const n = 20
	for i := 1; i <= n; i++ {
		r := reading.Reading{Key: fmt.Sprintf("r-%03d", i), Value: float64(i)}
		p.Handle(nil, a.message(i, r.Key, reading.Encode(r)))
	}
	require.Eventually(t, func() bool {
		applied, err := reading.Applied(db)
		return err == nil && len(applied) == n
	}, 10*time.Second, 5*time.Millisecond, "the messages behind the held one commit")
	time.Sleep(50 * time.Millisecond) // several retries of the held key
	require.Empty(t, a.acked(), "their acks wait behind the held message's")

	require.NoError(t, claim.Abandon(ctx))
	require.NoError(t, p.Close())
	order := a.acked()
	require.Len(t, order, n+1)
	for i, j := range order {
		require.Equal(t, i, j, "acks in delivery order")
	}
	mu.Lock()
	require.Equal(t, []error{nil}, attempts, "OnResult reports the held message once, applied")
	mu.Unlock()
}

// TestPipelineAfterCloseLeavesMessagesUnacked: a message handed to a
// closed Pipeline (paho may deliver one between Consume's Close and its
// Disconnect) is reported as oncekv.ErrClosed and not acked; a closed
// store's Pipeline cannot be made.
func TestPipelineAfterCloseLeavesMessagesUnacked(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "consumer.db"), nil)
	require.NoError(t, err)
	var got []error
	p, err := mqtt.NewPipeline(context.Background(), db, mqtt.ConsumerOptions{
		MaxInFlight: -1, // the default
		OnResult: func(key string, _ oncekv.Result, err error, acked bool) {
			require.False(t, acked)
			require.Equal(t, "r-late", key)
			got = append(got, err)
		},
	})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "Close again")
	a := &acks{t: t, db: db}
	r := reading.Reading{Key: "r-late"}
	p.Handle(nil, a.message(0, r.Key, reading.Encode(r)))
	require.Empty(t, a.acked())
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0], oncekv.ErrClosed)

	require.NoError(t, db.Close())
	_, err = mqtt.NewPipeline(context.Background(), db, mqtt.ConsumerOptions{})
	require.ErrorIs(t, err, oncekv.ErrClosed)
}
