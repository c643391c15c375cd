package queue_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// modelMsg is a message in the in-memory model of a queue.
type modelMsg struct {
	id, token  uint64
	key, body  string
	visibleAt  time.Time
	leased     bool
	attempt    int
	lastError  string
	enqueuedAt time.Time
}

// queueModel is what the queue should do, written the simplest way: a
// slice scanned in full.
type queueModel struct {
	now              time.Time
	live             []*modelMsg
	dead             map[uint64]*modelMsg
	keys             map[string]string // key -> body, marks never expire here
	ids              map[string]uint64
	seq, token       uint64
	maxAttempts      int
	visibility       time.Duration
	delivered, stale []*queue.Message
}

func (m *queueModel) find(id uint64) *modelMsg {
	for _, x := range m.live {
		if x.id == id {
			return x
		}
	}
	return nil
}

func (m *queueModel) remove(id uint64) {
	for i, x := range m.live {
		if x.id == id {
			m.live = append(m.live[:i], m.live[i+1:]...)
			return
		}
	}
}

// receive leases the oldest visible message, dead-lettering exhausted
// ones whose lease ran out, as Receive does.
func (m *queueModel) receive() *modelMsg {
	for {
		var best *modelMsg
		for _, x := range m.live {
			if x.visibleAt.After(m.now) {
				continue
			}
			if best == nil || x.visibleAt.Before(best.visibleAt) || x.visibleAt.Equal(best.visibleAt) && x.id < best.id {
				best = x
			}
		}
		if best == nil {
			return nil
		}
		if best.leased {
			best.lastError = fmt.Sprintf("lease of attempt %d ran out", best.attempt)
			if best.attempt >= m.maxAttempts {
				m.remove(best.id)
				m.dead[best.id] = best
				continue
			}
		}
		m.token++
		best.token, best.attempt, best.leased = m.token, best.attempt+1, true
		best.visibleAt = m.now.Add(m.visibility)
		return best
	}
}

// holds reports whether delivery d still holds its message.
func (m *queueModel) holds(d *queue.Message) *modelMsg {
	x := m.find(d.ID)
	if x == nil || x.token != d.Token || !x.leased {
		return nil
	}
	return x
}

func TestQueueAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ft := newFakeTime()
		path := filepath.Join(t.TempDir(), fmt.Sprintf("model-%d.db", time.Now().UnixNano()))
		db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: ft.Now, ExpireInterval: -1})
		require.NoError(rt, err)
		defer db.Close()
		// Base = Cap = 1ns: the jitter is always 0, so a nack's delay is
		// exactly its Retry-After and the model can predict it.
		q, err := queue.Open(db, "model", &queue.Options{Visibility: time.Minute, Timer: ft.Timer,
			Retry: &retry.Policy{Base: 1, Cap: 1, MaxAttempts: 3}})
		require.NoError(rt, err)
		defer q.Close()
		// token 1: Open takes a lease token of its own, the line below
		// which a lease is an earlier process's.
		m := &queueModel{now: t0, dead: map[uint64]*modelMsg{}, keys: map[string]string{}, ids: map[string]uint64{},
			maxAttempts: 3, visibility: time.Minute, token: 1}

		checkDelivery := func(got *queue.Message, want *modelMsg) {
			require.Equal(rt, want.id, got.ID)
			require.Equal(rt, want.key, got.Key)
			require.Equal(rt, want.body, string(got.Body))
			require.Equal(rt, want.attempt, got.Attempt)
			require.Equal(rt, want.token, got.Token)
			require.Equal(rt, want.lastError, got.LastError)
			require.True(rt, want.enqueuedAt.Equal(got.EnqueuedAt))
		}
		pickDelivery := func(rt *rapid.T) *queue.Message {
			all := append(append([]*queue.Message{}, m.delivered...), m.stale...)
			if len(all) == 0 {
				rt.Skip("nothing delivered yet")
			}
			return rapid.SampledFrom(all).Draw(rt, "delivery")
		}
		delivered := func(got *queue.Message, want *modelMsg) {
			checkDelivery(got, want)
			for i, d := range m.delivered {
				if d.ID == want.id {
					m.stale = append(m.stale, d)
					m.delivered = append(m.delivered[:i], m.delivered[i+1:]...)
					break
				}
			}
			m.delivered = append(m.delivered, got)
		}
		rt.Repeat(map[string]func(*rapid.T){
			"enqueue": func(rt *rapid.T) {
				key := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f"}).Draw(rt, "key")
				body := rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "body")
				delay := time.Duration(rapid.IntRange(0, 2).Draw(rt, "delay")) * time.Minute
				id, err := q.Enqueue(ctx, queue.Message{Key: key, Body: []byte(body), Delay: delay})
				if first, ok := m.keys[key]; ok {
					if first != body {
						require.ErrorIs(rt, err, oncekv.ErrKeyReuse)
						return
					}
					require.NoError(rt, err)
					require.Equal(rt, m.ids[key], id)
					return
				}
				require.NoError(rt, err)
				m.seq++
				require.Equal(rt, m.seq, id)
				m.keys[key], m.ids[key] = body, id
				m.live = append(m.live, &modelMsg{id: id, key: key, body: body, visibleAt: m.now.Add(delay), enqueuedAt: m.now})
			},
			"receive": func(rt *rapid.T) {
				ms, err := q.Poll(ctx, 1)
				require.NoError(rt, err)
				want := m.receive()
				if want == nil {
					require.Empty(rt, ms)
					return
				}
				require.Len(rt, ms, 1)
				delivered(ms[0], want)
			},
			"ackAndReceive": func(rt *rapid.T) {
				d := pickDelivery(rt)
				// Cancelled by the ack's commit: a wait for a message
				// ends at once, with ErrNotReceived.
				cctx, cancel := untilChanged(q)
				defer cancel()
				got, err := q.AckAndReceive(cctx, d)
				if m.holds(d) == nil {
					require.ErrorIs(rt, err, oncekv.ErrFenced)
					require.NotErrorIs(rt, err, queue.ErrNotReceived)
					return
				}
				m.remove(d.ID)
				want := m.receive()
				if want == nil {
					require.ErrorIs(rt, err, queue.ErrNotReceived)
					require.Nil(rt, got)
					return
				}
				require.NoError(rt, err)
				delivered(got, want)
			},
			"ack": func(rt *rapid.T) {
				d := pickDelivery(rt)
				err := q.Ack(ctx, d)
				if m.holds(d) == nil {
					require.ErrorIs(rt, err, oncekv.ErrFenced)
					return
				}
				require.NoError(rt, err)
				m.remove(d.ID)
			},
			"nack": func(rt *rapid.T) {
				d := pickDelivery(rt)
				after := time.Duration(rapid.IntRange(0, 3).Draw(rt, "after")) * time.Minute
				permanent := rapid.IntRange(0, 9).Draw(rt, "permanent") == 0
				cause := retry.After(after, errors.New("failed"))
				if permanent {
					cause = oncekv.Permanent(cause)
				}
				err := q.Nack(ctx, d, cause)
				x := m.holds(d)
				if x == nil {
					require.ErrorIs(rt, err, oncekv.ErrFenced)
					return
				}
				require.NoError(rt, err)
				x.lastError, x.leased = "failed", false
				if permanent || x.attempt >= m.maxAttempts {
					m.remove(x.id)
					m.dead[x.id] = x
					return
				}
				x.visibleAt = m.now.Add(after)
			},
			"extend": func(rt *rapid.T) {
				d := pickDelivery(rt)
				err := q.Extend(ctx, d, time.Minute)
				x := m.holds(d)
				if x == nil {
					require.ErrorIs(rt, err, oncekv.ErrFenced)
					return
				}
				require.NoError(rt, err)
				x.visibleAt = m.now.Add(time.Minute)
			},
			"advance": func(rt *rapid.T) {
				d := time.Duration(rapid.IntRange(1, 90).Draw(rt, "seconds")) * time.Second
				ft.Advance(d)
				m.now = m.now.Add(d)
			},
			"": func(rt *rapid.T) {
				st, err := q.Stats()
				require.NoError(rt, err)
				require.Equal(rt, uint64(len(m.live)), st.Depth)
				require.Equal(rt, uint64(len(m.dead)), st.Dead)
				var bytes uint64
				for _, x := range m.live {
					bytes += uint64(len(x.key) + len(x.body))
				}
				for _, x := range m.dead {
					bytes += uint64(len(x.key) + len(x.body))
				}
				require.Equal(rt, bytes, st.Bytes)
				// The gauges come from counts kept by the writes: they
				// must be what a scan of the model finds, and Check must
				// find the counts equal to a scan of the store.
				var ready, inFlight, delayed uint64
				for _, x := range m.live {
					switch {
					case !x.visibleAt.After(m.now):
						ready++
					case x.leased:
						inFlight++
					default:
						delayed++
					}
				}
				require.Equal(rt, []uint64{ready, inFlight, delayed, 0}, []uint64{st.Ready, st.InFlight, st.Delayed, st.Waiting}, "%+v", st)
				require.NoError(rt, q.View().Check(func(p error) error { return p }))
				dead, err := q.DeadLetters(0, 100)
				require.NoError(rt, err)
				require.Len(rt, dead, len(m.dead))
				for _, d := range dead {
					x := m.dead[d.ID]
					require.NotNil(rt, x)
					require.Equal(rt, x.attempt, d.Attempt)
					require.Equal(rt, x.lastError, d.LastError)
				}
			},
		})
	})
}
