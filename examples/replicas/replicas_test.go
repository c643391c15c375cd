//go:build unix

package replicas_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/examples/replicas"
)

// The child's environment: a replica to run instead of the tests.
const (
	childEnv  = "ONCEKV_REPLICA" // the replica's name
	schemaEnv = "ONCEKV_REPLICA_SCHEMA"
	dsnEnv    = "ONCEKV_PG_DSN"
	soakEnv   = "ONCEKV_REPLICAS_SOAK" // a multiplier of the payments
)

// The torture's lease: a paused replica loses its keys after it.
const lease = time.Second

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		if err := runReplica(name); err != nil {
			fmt.Fprintln(os.Stderr, "replica:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runReplica serves one replica on 127.0.0.1 until killed, printing its
// address.
func runReplica(name string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(dsnEnv))
	if err != nil {
		return err
	}
	s, err := replicas.NewServer(ctx, pool, replicas.Config{
		Name: name, Schema: os.Getenv(schemaEnv), Lease: lease, Work: 20 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("listening http://" + ln.Addr().String())
	return http.Serve(ln, s.Handler())
}

// replica is one running child.
type replica struct {
	cmd *exec.Cmd
	url string
}

// start runs replica name and waits for its address.
func start(t *testing.T, dsn, schema, name string) *replica {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+name, schemaEnv+"="+schema, dsnEnv+"="+dsn)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "replica %s did not start", name)
	return &replica{cmd: cmd, url: strings.TrimPrefix(strings.TrimSpace(line), "listening ")}
}

func (r *replica) kill() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// TestReplicasTortured: three replicas sharing one schema, eight clients
// paying through them with retries to the next replica, answers dropped
// after processing, and replicas SIGKILLed (and restarted) or paused
// with SIGSTOP past their lease and resumed. Per payment, the row exists
// exactly once; every 2xx answer for a key carries the same body and
// Location; no answer is another caller's; nothing is left claimed.
func TestReplicasTortured(t *testing.T) {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		t.Skipf("%s is not set: no PostgreSQL to test against (start one with .ci/postgres.sh)", dsnEnv)
	}
	payments, clients := 500, 8
	if n, _ := strconv.Atoi(os.Getenv(soakEnv)); n > 1 {
		payments *= n
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // after the schema's drop below: cleanups run last first
	schema := fmt.Sprintf("replicas_%d", os.Getpid())
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})

	var mu sync.Mutex
	reps := make([]*replica, 3)
	for i := range reps {
		reps[i] = start(t, dsn, schema, "r"+strconv.Itoa(i))
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range reps {
			_ = r.cmd.Process.Signal(syscall.SIGCONT)
			r.kill()
		}
	}()
	urls := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := make([]string, len(reps))
		for i, r := range reps {
			out[i] = r.url
		}
		return out
	}
	client := &replicas.Client{
		Replicas: urls,
		HTTP:     &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}},
		Timeout:  1500 * time.Millisecond,
		MaxWait:  200 * time.Millisecond,
	}

	// Chaos: after every 10 payments, kill (and restart) a replica, or
	// pause one past its lease and resume it later: 3 kills for 2 pauses,
	// so 500 payments make 30 kills and 20 pauses.
	var done atomic.Int64
	var kills, pauses atomic.Int64
	chaos := make(chan struct{}, payments)
	chaosDone := make(chan struct{})
	var paused sync.WaitGroup
	go func() {
		defer close(chaosDone)
		event := 0
		for range chaos {
			i := rand.N(len(reps))
			event++
			if event%5 != 2 && event%5 != 4 {
				mu.Lock()
				old := reps[i]
				mu.Unlock()
				old.kill()
				kills.Add(1)
				r := start(t, dsn, schema, "r"+strconv.Itoa(i))
				mu.Lock()
				reps[i] = r
				mu.Unlock()
				continue
			}
			mu.Lock()
			r := reps[i]
			mu.Unlock()
			if r.cmd.Process.Signal(syscall.SIGSTOP) != nil {
				continue
			}
			pauses.Add(1)
			paused.Go(func() {
				time.Sleep(lease + rand.N(2*lease))
				_ = r.cmd.Process.Signal(syscall.SIGCONT)
			})
		}
	}()

	type outcome struct {
		p       replicas.Payment
		key     string
		answers []replicas.Answer
		err     error
	}
	work := make(chan int)
	results := make(chan outcome, payments)
	began := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		caller := "caller-" + strconv.Itoa(c)
		wg.Go(func() {
			for n := range work {
				p := replicas.Payment{Caller: caller, ID: "p-" + strconv.Itoa(n), Amount: int64(n)}
				key := "pay-" + strconv.Itoa(n)
				pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				answers, err := client.Pay(pctx, key, p, func() bool { return rand.N(6) == 0 })
				cancel()
				results <- outcome{p, key, answers, err}
				if done.Add(1)%10 == 0 {
					chaos <- struct{}{}
				}
			}
		})
	}
	for n := range payments {
		work <- n
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(began)
	close(chaos)
	<-chaosDone
	paused.Wait()
	close(results)

	// Every answer for a payment is the same one, and the caller's.
	seen := 0
	for o := range results {
		require.NoError(t, o.err, "payment %s of %s", o.p.ID, o.p.Caller)
		require.NotEmpty(t, o.answers)
		first := o.answers[0]
		var got replicas.Payment
		require.NoError(t, json.Unmarshal(first.Body, &got))
		require.Equal(t, o.p.Caller, got.Caller, "another caller's answer")
		require.Equal(t, o.p.ID, got.ID, "another payment's answer")
		for _, a := range o.answers[1:] {
			require.Equal(t, string(first.Body), string(a.Body), "payment %s of %s", o.p.ID, o.p.Caller)
			require.Equal(t, first.Location, a.Location)
		}
		seen++
	}
	require.Equal(t, payments, seen)

	// Exactly one row per payment.
	var rows, distinct, twice int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT (caller, id)) FROM "+
		pgx.Identifier{schema, "payments"}.Sanitize()).Scan(&rows, &distinct))
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM "+
		pgx.Identifier{schema, "payments"}.Sanitize()+" GROUP BY caller, id HAVING count(*) > 1) d").Scan(&twice))
	require.Zero(t, twice, "payments made twice")
	require.Equal(t, payments, rows)
	require.Equal(t, payments, distinct)

	// Nothing is left claimed once the leases have ended.
	time.Sleep(lease)
	var claimed int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "marks"}.Sanitize()+
		" WHERE state = 1").Scan(&claimed))
	require.Zero(t, claimed, "keys still claimed")
	var doneMarks int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "marks"}.Sanitize()+
		" WHERE state = 2").Scan(&doneMarks))
	require.Equal(t, payments, doneMarks, "one DONE mark per payment")

	var tokens int
	require.NoError(t, pool.QueryRow(ctx, "SELECT last_value FROM "+pgx.Identifier{schema, "claim_tokens"}.Sanitize()).Scan(&tokens))

	require.GreaterOrEqual(t, kills.Load(), int64(3*payments/50), "SIGKILLs")
	st := client.Stats()
	t.Logf("%d payments by %d clients through 3 replicas in %v: %d attempts, %d answers kept (%d replays), "+
		"%d answers dropped after processing, %d 409, %d 5xx, %d transport errors; %d SIGKILLs (each restarted), %d SIGSTOP/SIGCONT pauses; "+
		"%d claims for %d payments (%d released or taken over)",
		payments, clients, elapsed.Round(time.Millisecond), st.Attempts.Load(), st.OK.Load(), st.Replayed.Load(),
		st.Dropped.Load(), st.InProgress.Load(), st.ServerErrors.Load(), st.TransportErrors.Load(), kills.Load(), pauses.Load(),
		tokens, payments, tokens-payments)
}
