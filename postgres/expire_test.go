package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
	"github.com/oncekv/oncekv/window"
)

// hostPool is a pool for one simulated host, its connections named so
// that the test can wait for them to be gone.
func hostPool(t *testing.T, name string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(testDSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// acked is a key a client had acknowledged, with its first-seen time.
type acked struct {
	key   string
	first time.Time
}

// TestExpiryOnTwoHostsWhileClientsApply: two hosts (stores on pools of
// their own, one clock) run Expire in a loop while 8 clients, 4 on each,
// apply new keys and deliver acknowledged ones again, and the clock moves
// on through some 20 windows. No key is expired early: a delivery of an
// acknowledged key before its window's end plus the retention, by a
// clock read after the delivery, is a duplicate; no mark is lost: at the
// end every key not expired yet is a duplicate; every expired window was
// dropped by exactly one host; and the marks' partitions hold no dead
// tuple and saw no row deleted (pg_stat_user_tables, read once the hosts'
// backends have exited and flushed their counts).
func TestExpiryOnTwoHostsWhileClientsApply(t *testing.T) {
	schema := freshSchema(t, newPool(t))
	var now atomic.Int64
	begin := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now.Store(begin.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	const retention, span = 4 * time.Minute, time.Minute
	win := window.Config{Span: span, Retention: retention}
	opts := postgres.Options{Schema: schema, Retention: retention, WindowSpan: span, Now: clock, LockTimeout: time.Second}
	names := []string{"oncekv-host-a", "oncekv-host-b"}
	var pools []*pgxpool.Pool
	var hosts []*postgres.Store
	for _, name := range names {
		p := hostPool(t, name)
		s, err := postgres.Open(context.Background(), p, opts)
		require.NoError(t, err)
		pools, hosts = append(pools, p), append(hosts, s)
	}
	ctx := context.Background()
	stop := make(chan struct{})
	var work sync.WaitGroup
	var dropped [2]atomic.Int64
	for h, s := range hosts {
		work.Add(1)
		go func() {
			defer work.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				st, err := s.Expire(ctx)
				if err != nil {
					t.Errorf("host %d: expire: %v", h, err)
					return
				}
				dropped[h].Add(int64(st.Windows))
			}
		}()
	}
	var mu sync.Mutex
	var keys []acked
	var applied, duplicates, early, retries atomic.Int64
	clients := sync.WaitGroup{}
	for c := range 8 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			s := hosts[c%2]
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for i := 0; i < 120; i++ {
				key := fmt.Sprintf("c%d-%d", c, i)
				res, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, nil)
				for try := 0; try < 20 && retriable(err); try++ {
					retries.Add(1) // a DDL lock that timed out, as a consumer would retry
					res, err = s.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, nil)
				}
				if err != nil {
					t.Errorf("apply %s: %v", key, err)
					return
				}
				applied.Add(1)
				mu.Lock()
				keys = append(keys, acked{key, res.FirstSeen})
				old := keys[rng.IntN(len(keys))]
				mu.Unlock()
				res, err = s.Apply(ctx, oncekv.Request{Handler: "h", Key: old.key}, func(context.Context, pgx.Tx) ([]byte, error) {
					return nil, errors.New("ran again")
				})
				after := clock()
				deadline := time.Unix(0, win.ExpiresAt(win.Start(old.first)))
				switch {
				case err == nil && res.Duplicate:
					duplicates.Add(1)
				case after.Before(deadline):
					early.Add(1)
					t.Errorf("%s first seen %v delivered again by %v, before its window expires at %v: %v, %+v", old.key, old.first, after, deadline, err, res)
				}
				if c == 0 {
					now.Add(int64(10 * time.Second)) // 20 windows over the run
				}
			}
		}()
	}
	clients.Wait()
	close(stop)
	work.Wait()
	final := clock()
	for h, s := range hosts { // both at the final time: the work is done once
		st, err := s.Expire(ctx)
		require.NoError(t, err)
		dropped[h].Add(int64(st.Windows))
	}
	var gone, kept int
	for _, k := range keys {
		res, err := hosts[0].Apply(ctx, oncekv.Request{Handler: "h", Key: k.key}, nil)
		require.NoError(t, err)
		if final.UnixNano() < win.ExpiresAt(win.Start(k.first)) {
			require.True(t, res.Duplicate, "%s first seen %v is lost by %v", k.key, k.first, final)
			kept++
		} else if !res.Duplicate {
			gone++
		}
	}
	for _, s := range hosts {
		require.NoError(t, s.Close())
	}
	for _, p := range pools {
		p.Close()
	}
	pool := newPool(t)
	st := deadTuples(t, pool, schema, names)
	// Every window from the first to the one after the last was current
	// at some point, for a client or an expiry, which made its partition.
	created := int((win.Start(final)-win.Start(begin))/int64(span)) + 2
	t.Logf("applied %d keys (%d retries) over %v of the store's clock; deliveries again %d answered as duplicates, 0 early; "+
		"at the end %d kept, %d expired; windows dropped by host a %d, by host b %d; partitions left %d, "+
		"their dead tuples %d, rows deleted %d, rows updated %d",
		applied.Load(), retries.Load(), final.Sub(begin), duplicates.Load(), kept, gone, dropped[0].Load(), dropped[1].Load(),
		st.partitions, st.dead, st.deleted, st.updated)
	require.Zero(t, early.Load())
	require.Positive(t, gone, "some windows expired during the run")
	require.Zero(t, st.dead)
	require.Zero(t, st.deleted)
	require.Zero(t, st.updated)
	require.Equal(t, int(dropped[0].Load()+dropped[1].Load()), created-st.partitions,
		"every window created and gone was dropped by one host")
	requireOneMarkPerKey(t, pool, schema)
}

// partitionStats is what pg_stat_user_tables says of a schema's marks
// partitions.
type partitionStats struct {
	partitions             int
	dead, deleted, updated int64
}

// deadTuples waits until no backend of the named applications is left
// (an exiting backend flushes its counts), then sums the counts of the
// schema's mark partitions.
func deadTuples(t *testing.T, pool *pgxpool.Pool, schema string, apps []string) partitionStats {
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY($1)", apps).Scan(&n))
		if n == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the hosts' backends did not exit")
		time.Sleep(20 * time.Millisecond) // waiting for other processes to exit, not for time to pass
	}
	var st partitionStats
	_, err := pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(n_dead_tup), 0), coalesce(sum(n_tup_del), 0), coalesce(sum(n_tup_upd), 0)
		FROM pg_stat_user_tables WHERE schemaname = $1 AND relname LIKE 'marks\_%'`, schema).Scan(&st.partitions, &st.dead, &st.deleted, &st.updated))
	return st
}

// TestDuplicatesFlowWhileExpiryWaits: while a long effect keeps its
// transaction open, an Expire's DETACH ... CONCURRENTLY of an expired
// window waits for it; meanwhile duplicates are answered, new keys apply
// and claims are taken, each within a second, and once the effect ends
// the expiry finishes: the duplicate path never queues behind DDL.
func TestDuplicatesFlowWhileExpiryWaits(t *testing.T) {
	pool := newPool(t)
	var now atomic.Int64
	begin := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now.Store(begin.UnixNano())
	const retention, span = 2 * time.Hour, time.Hour
	s := openStore(t, pool, postgres.Options{Retention: retention, WindowSpan: span, LockTimeout: 30 * time.Second,
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	ctx := context.Background()
	_, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "old"}, nil)
	require.NoError(t, err)
	now.Add(int64(span))
	_, err = s.Apply(ctx, oncekv.Request{Handler: "h", Key: "dup"}, func(context.Context, pgx.Tx) ([]byte, error) { return []byte("kept"), nil })
	require.NoError(t, err)
	now.Add(int64(retention)) // the first window has expired, the second not

	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "long"}, func(context.Context, pgx.Tx) ([]byte, error) {
			close(held)
			<-release
			return nil, nil
		})
		done <- err
	}()
	<-held
	expired := make(chan oncekv.ExpireStats, 1)
	go func() {
		st, err := s.Expire(ctx)
		assertNoError(t, err)
		expired <- st
	}()
	waitingForLock(t, pool, "DETACH")
	for i := range 20 {
		quick, cancel := context.WithTimeout(ctx, time.Second)
		res, err := s.Apply(quick, oncekv.Request{Handler: "h", Key: "dup"}, nil)
		require.NoError(t, err, "a duplicate while the detach waits")
		require.Equal(t, "kept", string(res.Response))
		res, err = s.Apply(quick, oncekv.Request{Handler: "h", Key: fmt.Sprint("new-", i)}, nil)
		require.NoError(t, err, "a new key while the detach waits")
		require.False(t, res.Duplicate)
		c, err := s.Claim(quick, oncekv.Request{Handler: "h", Key: fmt.Sprint("claim-", i)}, time.Minute)
		require.NoError(t, err)
		require.NoError(t, c.Fail(quick, nil))
		cancel()
	}
	require.Empty(t, expired, "the detach waits for the long effect")
	close(release)
	require.NoError(t, <-done)
	st := <-expired
	require.Equal(t, 1, st.Windows)
	res, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "old"}, nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "its window is gone")
}

// retriable reports whether err says to deliver again.
func retriable(err error) bool {
	a := oncekv.Classify(err).Action
	return err != nil && (a == oncekv.RetryLater || a == oncekv.RetryNow)
}

// assertNoError reports err from a goroutine other than the test's.
func assertNoError(t *testing.T, err error) {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
	}
}
