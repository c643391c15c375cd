package relay_test

import (
	"context"
	"fmt"
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

// env is a store on a fake clock with a queue in it.
type env struct {
	db    *oncekv.DB
	q     *queue.Queue
	clock *oncetest.Timers
	path  string
	qopts queue.Options
}

func newEnv(t *testing.T, qopts *queue.Options) *env {
	t.Helper()
	e := &env{clock: oncetest.NewTimers(t0), path: filepath.Join(t.TempDir(), "relay.db")}
	if qopts != nil {
		e.qopts = *qopts
	}
	e.qopts.Timer = e.clock.Timer
	e.open(t)
	t.Cleanup(func() {
		if e.db != nil {
			e.close(t)
		}
		oncetest.Check(t, e.path)
	})
	return e
}

func (e *env) open(t *testing.T) {
	t.Helper()
	db, err := oncekv.Open(e.path, &oncekv.Options{NoSync: true, Now: e.clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	q, err := queue.Open(db, "outbox", &e.qopts)
	require.NoError(t, err)
	e.db, e.q = db, q
}

func (e *env) close(t *testing.T) {
	t.Helper()
	require.NoError(t, e.q.Close())
	require.NoError(t, e.db.Close())
	e.db, e.q = nil, nil
}

// enqueue adds one message per key, its body "body of <key>".
func (e *env) enqueue(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		_, err := e.q.Enqueue(context.Background(), queue.Message{Key: k, Body: []byte("body of " + k)})
		require.NoError(t, err)
	}
}

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("m%03d", i)
	}
	return ks
}

func (e *env) stats(t *testing.T) queue.Stats {
	t.Helper()
	st, err := e.q.Stats()
	require.NoError(t, err)
	return st
}

// quiet waits until no message is ready or leased: every worker is idle,
// waiting on the fake clock.
func (e *env) quiet(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		st := e.stats(t)
		return st.Ready == 0 && st.InFlight == 0
	}, 20*time.Second, time.Millisecond)
}

// running is a Run in its own goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(run func(ctx context.Context) error) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx) }()
	return r
}

// stop cancels the Run and returns its error.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(20 * time.Second):
		require.FailNow(t, "Run did not return after its context was cancelled")
		return nil
	}
}

// call is one call of a recorder's send.
type call struct {
	key   string
	token uint64
	at    time.Time
}

// recorder is a Sender that logs every call and answers with reply (nil:
// success).
type recorder struct {
	clock func() time.Time
	reply func(m *queue.Message, n int) error // n: this key's calls before
	mu    sync.Mutex
	calls []call
	per   map[string]int
}

func (r *recorder) send(_ context.Context, m *queue.Message) error {
	r.mu.Lock()
	if r.per == nil {
		r.per = map[string]int{}
	}
	n := r.per[m.Key]
	r.per[m.Key]++
	r.calls = append(r.calls, call{key: m.Key, token: m.Token, at: r.clock()})
	reply := r.reply
	r.mu.Unlock()
	if reply == nil {
		return nil
	}
	return reply(m, n)
}

func (r *recorder) log() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.per[key]
}

// blocker is a Sender for one message that holds it until release is
// closed, then returns its context's error (nil while the grace period
// lasts).
type blocker struct {
	entered, release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}), release: make(chan struct{})}
}

func (b *blocker) send(ctx context.Context, _ *queue.Message) error {
	close(b.entered)
	<-b.release
	return ctx.Err()
}
