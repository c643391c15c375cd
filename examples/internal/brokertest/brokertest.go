// Package brokertest is what the broker examples' tests share: finding the
// broker that CI started, and running the consumer as a child process (the
// test binary run again) that the test SIGKILLs at random points and
// restarts, reading what it reports on its standard output.
package brokertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// URL returns the broker address in the environment variable env, or
// skips t, saying how to get one.
func URL(t *testing.T, env string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		t.Skipf("%s is not set: no broker to test against; run .ci/brokers.sh, which installs and starts mosquitto and nats-server on 127.0.0.1", env)
	}
	return u
}

// Scale returns n, times the value of ONCEKV_BROKER_SOAK when it is a
// positive integer: the default keeps each test well under a minute on two
// cores, a soak runs longer with more messages and more kills.
func Scale(n int) int { return oncetest.Soak("ONCEKV_BROKER_SOAK", n) }

// Log gathers the lines the children print, "VERB KEY", counting them by
// verb and remembering the keys seen with each (Line, Count, Keys). It is
// safe for concurrent use.
type Log = oncetest.Log

// NewLog returns an empty Log.
func NewLog() *Log { return oncetest.NewLog() }

// Child is a consumer running in a child process; its Kill SIGKILLs it
// and waits until it and its output have ended.
type Child = oncetest.LoggedChild

// Start runs the test binary again with no tests (-test.run=^$) and
// env set to cfg's JSON; the test package's TestMain, which calls Main,
// sees env and runs the consumer instead. Each line the child prints goes
// to log (and to standard error too when ONCEKV_BROKER_VERBOSE is set).
// The test's cleanup kills it if it still runs.
func Start(t *testing.T, env string, cfg any, log *Log) *Child {
	t.Helper()
	c, err := start(t, env, cfg, log)
	require.NoError(t, err)
	return c
}

// start is Start for any goroutine: it returns its error instead of
// failing the test, which only the test's goroutine may do.
func start(t *testing.T, env string, cfg any, log *Log) (*Child, error) {
	return oncetest.StartLogged(t, env, cfg, log, os.Getenv("ONCEKV_BROKER_VERBOSE") != "")
}

// Run is one chaos run: a seeded random source (the seed is logged), an
// ID unique to the run, to name its topics, sessions and streams, and the
// Log of the consumers it starts.
type Run struct {
	t   *testing.T
	env string
	rng *rand.Rand
	ID  string
	Log *Log

	stop   chan struct{}
	killed chan killed
}

// killed is what the kill loop hands back when it stops.
type killed struct {
	child *Child
	kills int
	err   error // a restart that failed, which ended the loop
}

// NewRun starts a run whose consumers are told by env that they are one.
func NewRun(t *testing.T, env string) *Run {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return &Run{t: t, env: env, rng: rand.New(rand.NewPCG(seed, 13)), ID: strconv.FormatUint(seed, 10), Log: NewLog()}
}

// Start starts a consumer with cfg (see Start).
func (r *Run) Start(cfg any) *Child { return Start(r.t, r.env, cfg, r.Log) }

// KillRepeatedly SIGKILLs c after a pause drawn uniformly from [0, 400ms),
// starts a new consumer with cfg, and again and again, in a goroutine of
// its own, until Stop.
func (r *Run) KillRepeatedly(c *Child, cfg any) {
	r.stop, r.killed = make(chan struct{}), make(chan killed, 1)
	go func() {
		kills := 0
		for {
			select {
			case <-r.stop:
				r.killed <- killed{child: c, kills: kills}
				return
			case <-time.After(time.Duration(r.rng.Int64N(int64(400 * time.Millisecond)))):
			}
			c.Kill()
			kills++
			var err error
			if c, err = start(r.t, r.env, cfg, r.Log); err != nil {
				r.killed <- killed{kills: kills, err: err}
				return
			}
		}
	}()
}

// Stop ends KillRepeatedly's loop, returning the consumer running now and
// the number of kills. It fails the test if a restart failed.
func (r *Run) Stop() (*Child, int) {
	close(r.stop)
	k := <-r.killed
	require.NoError(r.t, k.err, "restarting the consumer")
	return k.child, k.kills
}

// RequireAppliedOnce kills the last consumer c, opens its store at path
// and requires that want keys were applied, each exactly once, and that
// the store suppressed duplicates. It returns the store, closed when the
// test ends.
func (r *Run) RequireAppliedOnce(c *Child, path string, want int) *oncekv.DB {
	c.Kill()
	db, err := oncekv.Open(path, nil)
	require.NoError(r.t, err)
	r.t.Cleanup(func() { require.NoError(r.t, db.Close()) })
	applied, err := reading.Applied(db)
	require.NoError(r.t, err)
	require.Len(r.t, applied, want, "keys applied")
	for k, n := range applied {
		require.Equal(r.t, uint64(1), n, "key %s applied %d times", k, n)
	}
	require.Positive(r.t, r.Log.Count("dup"), "the duplicates reached the store and were suppressed")
	return db
}

// Say prints one "VERB KEY" line for the parent's Log; a child calls it.
func Say(verb, key string) {
	fmt.Println(verb + " " + key)
}

// Main is a broker test package's TestMain. In the tests' process it runs
// m. In a child that Start ran, it decodes env's value into a C, opens the
// store at dbPath(c), runs consume with a context that SIGTERM ends, and
// exits: 0 when consume returned nil, 1 when it failed, 2 when it could
// not start.
func Main[C any](m *testing.M, env string, dbPath func(c *C) string, consume func(ctx context.Context, db *oncekv.DB, c *C) error) {
	oncetest.ChildMain(m, env, dbPath, consume)
}
