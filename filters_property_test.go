package oncekv_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// windowModel is what the store must remember: for every key applied, the
// window it was first seen in, unless it was forgotten or expired.
type windowModel struct {
	t       *testing.T
	opts    *oncekv.Options
	clock   *oncetest.Clock
	path    string
	db      *oncekv.DB
	live    map[string]time.Time // key -> start of its window
	dropped map[string]bool      // expired or forgotten: the next Apply runs the effect
	next    int
}

func (m *windowModel) windowOf(t time.Time) time.Time { return t.Truncate(m.opts.WindowSpan) }

func (m *windowModel) apply(rt *rapid.T, key string) {
	res, err := m.db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)}, nil)
	require.NoError(rt, err)
	_, isLive := m.live[key]
	require.Equal(rt, isLive, res.Duplicate, "key %s: live=%v, store said duplicate=%v", key, isLive, res.Duplicate)
	if !isLive {
		m.live[key] = m.windowOf(m.clock.Now())
		delete(m.dropped, key)
	}
}

// TestPropertyNoFalseNegatives drives random applies, duplicates, clock
// moves, reopens, expiry and Forget, and checks after every step that a key
// the model says is live is reported as a duplicate and every other key is
// applied. A false negative of the filter would show as a live key applied
// again. It runs with the default filter, a very loose one (many false
// positives, so positives must be confirmed) and none.
func TestPropertyNoFalseNegatives(t *testing.T) {
	for name, rate := range map[string]float64{"default": 0, "loose": 0.4, "disabled": -1} {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				clock := oncetest.NewClock(epoch)
				m := &windowModel{
					t:     t,
					clock: clock,
					opts: &oncekv.Options{
						NoSync: true, Now: clock.Now, ExpireInterval: -1, ExpireStep: 3,
						WindowSpan: time.Hour, Retention: 4 * time.Hour, BloomFalsePositiveRate: rate,
					},
					path:    filepath.Join(t.TempDir(), fmt.Sprintf("p%d.db", time.Now().UnixNano())),
					live:    map[string]time.Time{},
					dropped: map[string]bool{},
				}
				db, err := oncekv.Open(m.path, m.opts)
				require.NoError(rt, err)
				m.db = db
				defer func() { require.NoError(rt, m.db.Close()) }()

				rt.Repeat(map[string]func(*rapid.T){
					"new key": func(rt *rapid.T) {
						m.next++
						m.apply(rt, fmt.Sprint("k", m.next))
					},
					"redeliver": func(rt *rapid.T) {
						if m.next == 0 {
							rt.Skip("no keys yet")
						}
						m.apply(rt, fmt.Sprint("k", rapid.IntRange(1, m.next).Draw(rt, "key")))
					},
					"advance clock": func(rt *rapid.T) {
						clock.Advance(time.Duration(rapid.Int64Range(0, int64(3*time.Hour)).Draw(rt, "by")))
					},
					"expire": func(rt *rapid.T) {
						_, err := m.db.Expire(context.Background())
						require.NoError(rt, err)
						now := clock.Now()
						for k, start := range m.live {
							if now.Sub(start.Add(m.opts.WindowSpan)) >= m.opts.Retention {
								delete(m.live, k)
								m.dropped[k] = true
							}
						}
					},
					"forget": func(rt *rapid.T) {
						if m.next == 0 {
							rt.Skip("no keys yet")
						}
						k := fmt.Sprint("k", rapid.IntRange(1, m.next).Draw(rt, "key"))
						require.NoError(rt, m.db.Forget("h", k))
						delete(m.live, k)
						m.dropped[k] = true
					},
					"reopen": func(rt *rapid.T) {
						require.NoError(rt, m.db.Close())
						db, err := oncekv.Open(m.path, m.opts)
						require.NoError(rt, err)
						m.db = db
					},
					"": func(rt *rapid.T) {
						var live uint64
						for _, w := range m.db.Stats().Windows {
							live += w.Marks
						}
						require.Equal(rt, uint64(len(m.live)), live, "live marks")
					},
				})
			})
		})
	}
}
