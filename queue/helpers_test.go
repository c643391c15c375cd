package queue_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
	"github.com/oncekv/oncekv/queue"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeTime is a clock for oncekv.Options.Now and a Timer for
// queue.Options driven by it: Advance fires the timers it passes.
type fakeTime struct {
	*oncetest.Clock
	mu     sync.Mutex
	timers []fakeTimer
	made   chan struct{} // receives when a timer is made
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func newFakeTime() *fakeTime {
	return &fakeTime{Clock: oncetest.NewClock(t0), made: make(chan struct{}, 1000)}
}

// Timer is queue.Options.Timer.
func (f *fakeTime) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(chan time.Time, 1)
	f.timers = append(f.timers, fakeTimer{at: f.Now().Add(d), c: c})
	select {
	case f.made <- struct{}{}:
	default: // nobody counts timers beyond the buffer
	}
	return c, func() bool { return true }
}

// Advance moves the clock and fires every timer whose time has come.
func (f *fakeTime) Advance(d time.Duration) {
	f.Clock.Advance(d)
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.Now()
	kept := f.timers[:0]
	for _, t := range f.timers {
		if !t.at.After(now) {
			t.c <- now
			continue
		}
		kept = append(kept, t)
	}
	f.timers = kept
}

// env is a store with a fake clock and a queue in it.
type env struct {
	db   *oncekv.DB
	q    *queue.Queue
	time *fakeTime
	path string
}

func newEnv(t *testing.T, opts *queue.Options) *env {
	t.Helper()
	ft := newFakeTime()
	path := filepath.Join(t.TempDir(), "q.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: ft.Now, ExpireInterval: -1})
	require.NoError(t, err)
	var o queue.Options
	if opts != nil {
		o = *opts
	}
	o.Timer = ft.Timer
	q, err := queue.Open(db, "jobs", &o)
	require.NoError(t, err)
	e := &env{db: db, q: q, time: ft, path: path}
	t.Cleanup(func() {
		_ = e.q.Close()
		require.NoError(t, e.db.Close())
		oncetest.Check(t, path)
	})
	return e
}

// receiveNow receives without waiting: a message must be visible.
func (e *env) receiveNow(t *testing.T) *queue.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := e.q.Receive(ctx)
	require.NoError(t, err)
	return m
}

// empty asserts that nothing is visible now.
func (e *env) empty(t *testing.T) {
	t.Helper()
	ms, err := e.q.Poll(context.Background(), 1)
	require.NoError(t, err)
	require.Empty(t, ms)
	st, err := e.q.Stats()
	require.NoError(t, err)
	require.Zero(t, st.Ready, "%+v", st)
}

func (e *env) stats(t *testing.T) queue.Stats {
	t.Helper()
	st, err := e.q.Stats()
	require.NoError(t, err)
	return st
}
