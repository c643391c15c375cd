package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// The stream of the crash test: one stream of deliveries per round, with
// duplicates, shared by the workers: worker w takes the deliveries w,
// w+workers, w+2*workers, ... so that one key is delivered to several
// processes, often at the same time.
const (
	streamWorkers = 4
	streamBatch   = 8 // deliveries per ApplyBatch, for the workers that batch
)

// streamKeys returns the round's deliveries: n keys drawn from n*2/3
// distinct ones.
func streamKeys(round, n int) []string {
	rng := rand.New(rand.NewPCG(uint64(round), 42))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("r%d-k%d", round, rng.IntN(n*2/3))
	}
	return keys
}

func userTable(schema, name string) string { return pgx.Identifier{schema, name}.Sanitize() }

// applyEffect is the workers' effect: a row appended to the user table
// applications(key), which has no key of its own, so that nothing but the
// store stops a second application: a key applied twice has two rows.
func applyEffect(schema, key string) func(context.Context, pgx.Tx) ([]byte, error) {
	q := "INSERT INTO " + userTable(schema, "applications") + " (key) VALUES ($1)"
	return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, q, key)
		return []byte("applied " + key), err
	}
}

// streamWorker is a child of TestStreamAcrossKilledProcesses: it applies
// its share of the round's deliveries from ONCEKV_PG_FROM on, printing
// "ack <j> <new|dup>" once delivery j is acknowledged (its Apply returned
// without error), as a consumer commits an offset; a delivery whose key
// is in progress elsewhere is retried after a short backoff, as a broker
// redelivers. "done" ends the share.
func streamWorker(ctx context.Context, s *postgres.Store, _ *pgxpool.Pool) error {
	env := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	round, w, from, n, batch := env("ONCEKV_PG_ROUND"), env("ONCEKV_PG_WORKER"), env("ONCEKV_PG_FROM"), env("ONCEKV_PG_N"), env("ONCEKV_PG_BATCH")
	schema := os.Getenv("ONCEKV_PG_SCHEMA")
	keys := streamKeys(round, n)
	var mine []string
	for i := w; i < len(keys); i += streamWorkers {
		mine = append(mine, keys[i])
	}
	step := 1
	if batch != 0 {
		step = streamBatch
	}
	for j := from; j < len(mine); j += step {
		chunk := mine[j:min(j+step, len(mine))]
		reqs := make([]oncekv.Request, len(chunk))
		for i, k := range chunk {
			reqs[i] = oncekv.Request{Handler: "stream", Key: k, Payload: []byte(k)}
		}
		for _, r := range settle(ctx, s, schema, reqs, batch != 0) {
			fmt.Println(r)
		}
	}
	fmt.Println("done")
	return nil
}

// settle applies reqs (in one batch, or one by one) until each is
// acknowledged, and returns their ack lines.
func settle(ctx context.Context, s *postgres.Store, schema string, reqs []oncekv.Request, batch bool) []string {
	acks := make([]string, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		var again []int
		var errs []error
		if batch {
			rs, err := s.ApplyBatch(ctx, pickReqs(reqs, pending), func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error) {
				return applyEffect(schema, reqs[pending[i]].Key)(ctx, tx)
			})
			for i, r := range rs {
				errs = append(errs, errors.Join(err, r.Err))
				if r.Err == nil && err == nil {
					acks[pending[i]] = ackLine(reqs[pending[i]], r.Duplicate)
				}
			}
			if rs == nil {
				errs = append(errs, err)
			}
		} else {
			for _, i := range pending {
				res, err := s.Apply(ctx, reqs[i], applyEffect(schema, reqs[i].Key))
				errs = append(errs, err)
				if err == nil {
					acks[i] = ackLine(reqs[i], res.Duplicate)
				}
			}
		}
		for i, err := range errs {
			if err == nil {
				continue
			}
			if a := oncekv.Classify(err).Action; a != oncekv.RetryLater && a != oncekv.RetryNow {
				fmt.Fprintf(os.Stderr, "worker: %v (%v)\n", err, a)
				os.Exit(3)
			}
			if i < len(pending) {
				again = append(again, pending[i])
			}
			fmt.Println("busy")
		}
		if len(again) > 0 {
			time.Sleep(time.Duration(2+rand.IntN(5)) * time.Millisecond) // a redelivery's backoff
		}
		pending = again
	}
	return acks
}

func pickReqs(reqs []oncekv.Request, idx []int) []oncekv.Request {
	out := make([]oncekv.Request, len(idx))
	for i, j := range idx {
		out[i] = reqs[j]
	}
	return out
}

// ackLine is what a worker prints for an acknowledged delivery: its key
// and whether it was a duplicate.
func ackLine(r oncekv.Request, dup bool) string {
	if dup {
		return "ack " + r.Key + " dup"
	}
	return "ack " + r.Key + " new"
}

// TestStreamAcrossKilledProcesses: 4 worker processes apply one stream of
// deliveries with duplicates, two of them one request at a time and two
// in batches, while the test SIGKILLs one at random every few dozen
// milliseconds and restarts it from its last acknowledged delivery (so
// what it had applied but not acknowledged is delivered again), for
// several rounds. After each round: every key of the stream was applied
// exactly once (one row each in a user table that nothing but the store
// keeps from taking two), so the count of applications is the count of
// distinct keys, every acknowledged key is marked (a
// delivery now is a duplicate), and no key has two marks in any of the
// partitions.
func TestStreamAcrossKilledProcesses(t *testing.T) {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	s := openStore(t, pool, postgres.Options{Schema: schema})
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE "+userTable(schema, "applications")+" (key text NOT NULL)")
	require.NoError(t, err)
	rounds, perRound := 4, 240*streamWorkers
	if testing.Short() {
		rounds = 2
	}
	if n, err := strconv.Atoi(os.Getenv("ONCEKV_PG_CRASH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	var kills, starts, acks, dups, busy, applies int
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	t.Logf("seed of the kills: random; streams: seeded by round")
	for round := range rounds {
		keys := streamKeys(round, perRound)
		acked := make([]int, streamWorkers) // deliveries acknowledged, per worker
		type running struct {
			c      *child
			done   chan struct{}
			fin    bool
			waited bool
		}
		var mu sync.Mutex
		procs := make([]*running, streamWorkers)
		start := func(w int) {
			mu.Lock()
			from := acked[w]
			mu.Unlock()
			if w >= 2 {
				from -= from % streamBatch // batches are acknowledged whole
			}
			c := startChild(t, "stream", schema,
				fmt.Sprintf("ONCEKV_PG_ROUND=%d", round), fmt.Sprintf("ONCEKV_PG_WORKER=%d", w),
				fmt.Sprintf("ONCEKV_PG_FROM=%d", from), fmt.Sprintf("ONCEKV_PG_N=%d", perRound),
				fmt.Sprintf("ONCEKV_PG_BATCH=%d", w/2))
			r := &running{c: c, done: make(chan struct{})}
			procs[w] = r
			starts++
			go func() {
				defer close(r.done)
				n := from
				for c.out.Scan() {
					line := c.out.Text()
					mu.Lock()
					switch {
					case strings.HasPrefix(line, "ack "):
						n++
						acked[w] = n
						acks++
						if strings.HasSuffix(line, " dup") {
							dups++
						}
					case line == "busy":
						busy++
					case line == "done":
						r.fin = true
					}
					mu.Unlock()
				}
			}()
		}
		for w := range streamWorkers {
			start(w)
		}
		for killsThisRound := 0; ; {
			time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
			alive := 0
			for w, r := range procs {
				select {
				case <-r.done:
					if r.waited {
						continue
					}
					r.waited = true
					require.NoError(t, r.c.cmd.Wait(), "worker %d", w)
					mu.Lock()
					fin := r.fin
					mu.Unlock()
					if !fin {
						t.Fatalf("worker %d ended without finishing", w)
					}
				default:
					alive++
				}
			}
			if alive == 0 {
				break
			}
			if killsThisRound >= 12 {
				continue
			}
			w := rng.IntN(streamWorkers)
			r := procs[w]
			select {
			case <-r.done:
				continue // finished already
			default:
			}
			require.NoError(t, r.c.cmd.Process.Signal(syscall.SIGKILL))
			<-r.done
			r.c.cmd.Wait() //nolint:errcheck // killed
			r.waited = true
			kills++
			killsThisRound++
			mu.Lock()
			fin := r.fin
			mu.Unlock()
			if !fin {
				start(w)
			}
		}
		distinct := map[string]bool{}
		for _, k := range keys {
			distinct[k] = true
		}
		var rows, applied int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT key) FROM "+userTable(schema, "applications")+" WHERE key LIKE $1",
			fmt.Sprintf("r%d-%%", round)).Scan(&rows, &applied))
		require.Equal(t, len(distinct), applied, "round %d: every distinct key applied", round)
		require.Equal(t, applied, rows, "round %d: no key applied twice", round)
		applies += rows
		requireAllDuplicates(t, s, distinct)
	}
	requireOneMarkPerKey(t, pool, schema)
	t.Logf("rounds %d, worker processes started %d, SIGKILLs %d, effects applied %d (= distinct keys), acknowledgements %d "+
		"(duplicates %d), retries after ErrInProgress or a lost connection %d", rounds, starts, kills, applies, acks, dups, busy)
	require.Positive(t, kills)
}

// requireAllDuplicates checks that a delivery of each key now is a
// duplicate: its mark is there.
func requireAllDuplicates(t *testing.T, s *postgres.Store, keys map[string]bool) {
	t.Helper()
	var reqs []oncekv.Request
	for k := range keys {
		reqs = append(reqs, oncekv.Request{Handler: "stream", Key: k, Payload: []byte(k)})
	}
	for len(reqs) > 0 {
		chunk := reqs[:min(500, len(reqs))]
		reqs = reqs[len(chunk):]
		rs, err := s.ApplyBatch(context.Background(), chunk, func(context.Context, pgx.Tx, int) ([]byte, error) {
			return nil, errors.New("an acknowledged key ran again")
		})
		require.NoError(t, err)
		for i, r := range rs {
			require.NoError(t, r.Err, chunk[i].Key)
			require.True(t, r.Duplicate, chunk[i].Key)
			require.Equal(t, "applied "+chunk[i].Key, string(r.Response))
		}
	}
}

// requireOneMarkPerKey checks, in SQL, that no key has two marks across
// the partitions of schema.
func requireOneMarkPerKey(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	var twice int
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(*) FROM (SELECT handler, key FROM "+userTable(schema, "marks")+" GROUP BY handler, key HAVING count(*) > 1) d").Scan(&twice))
	require.Zero(t, twice, "keys with more than one mark")
}
