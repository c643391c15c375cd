package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// fenceLease is the short lease of the fencing test's claims, on the
// database's clock.
const fenceLease = 300 * time.Millisecond

// fenceWorker is a child of TestPausedClaimIsFencedOff, named by
// ONCEKV_PG_WHO. It works on ONCEKV_PG_KEYS jobs at once; it is the first
// to claim the even jobs when it is "a", the odd ones when "b", and then
// pauses in the middle of the work, past its lease, until the parent says
// "resume <job>" (after the other process took the job over and finished
// it). For the other jobs it waits for "go <job>" (the first claim is
// taken) and claims until its lease ran out. Each job's work is a write
// to the user table out(job, writer, token) fenced by the claim's token,
// then Complete. It prints what happened: "claimed", "wrote", "refused
// <stored> <presented>", "completed", "fenced".
func fenceWorker(ctx context.Context, s *postgres.Store, pool *pgxpool.Pool) error {
	who := os.Getenv("ONCEKV_PG_WHO")
	keys, _ := strconv.Atoi(os.Getenv("ONCEKV_PG_KEYS"))
	out := userTable(os.Getenv("ONCEKV_PG_SCHEMA"), "out")
	signals := make([]chan struct{}, keys)
	for i := range signals {
		signals[i] = make(chan struct{}, 1)
	}
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			f := strings.Fields(in.Text())
			if len(f) == 2 {
				if j, err := strconv.Atoi(f[1]); err == nil && j >= 0 && j < keys {
					signals[j] <- struct{}{}
				}
			}
		}
	}()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for j := range keys {
		first := (j%2 == 0) == (who == "a")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !first {
				<-signals[j] // "go": the other one holds it
			}
			req := oncekv.Request{Handler: "jobs", Key: strconv.Itoa(j)}
			var c *postgres.Claim
			for c == nil {
				got, err := s.Claim(ctx, req, fenceLease)
				var ipe *oncekv.InProgressError
				switch {
				case errors.As(err, &ipe):
					time.Sleep(ipe.RetryAfter(s.Now()) + time.Millisecond) // come back when the lease ends
				case err != nil:
					errs <- err
					return
				case got.Done():
					errs <- fmt.Errorf("job %d done before this worker claimed it", j)
					return
				default:
					c = got
				}
			}
			say("claimed %d %d", j, c.Token())
			if first {
				<-signals[j] // the pause: "resume", once the lease ran out and the job was taken over
			}
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := s.AdvanceFence(ctx, tx, "job/"+req.Key, c.Token()); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "INSERT INTO "+out+" AS o VALUES ($1, $2, $3) ON CONFLICT (job) DO UPDATE SET writer = excluded.writer, token = excluded.token", j, who, int64(c.Token()))
				return err
			})
			var fe *oncekv.FenceError
			switch {
			case errors.As(err, &fe):
				say("refused %d %d %d", j, fe.Stored, fe.Presented)
			case err != nil:
				errs <- err
				return
			default:
				say("wrote %d", j)
			}
			_, err = c.Complete(ctx, []byte(who), nil)
			switch {
			case errors.Is(err, oncekv.ErrFenced):
				say("fenced %d", j)
			case err != nil:
				errs <- err
			default:
				say("completed %d", j)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	return nil
}

// TestPausedClaimIsFencedOff: two processes claim the same jobs with
// short leases on the database's clock. For each job, the one that claims
// it first pauses past its lease (until the test lets it go on); the
// other one, refused with ErrInProgress until the lease ends, takes the
// job over with a greater token, writes its result to a user table fenced
// by that token, and completes. When the paused one wakes up, its late
// write is refused (a *FenceError with both tokens), its Complete is
// ErrFenced, and the table and the mark hold the taker's result.
func TestPausedClaimIsFencedOff(t *testing.T) {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	s := openStore(t, pool, postgres.Options{Schema: schema})
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE "+userTable(schema, "out")+" (job int PRIMARY KEY, writer text NOT NULL, token bigint NOT NULL)")
	require.NoError(t, err)
	const keys = 8
	procs := map[string]*child{}
	for _, who := range []string{"a", "b"} {
		procs[who] = startChild(t, "fence", schema, "ONCEKV_PG_WHO="+who, fmt.Sprintf("ONCEKV_PG_KEYS=%d", keys))
	}
	other := map[string]string{"a": "b", "b": "a"}
	type event struct{ who, line string }
	events := make(chan event)
	var readers sync.WaitGroup
	for who, c := range procs {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for c.out.Scan() {
				events <- event{who, c.out.Text()}
			}
		}()
	}
	go func() { readers.Wait(); close(events) }()
	claimed := map[int]map[string]uint64{}
	seen := map[string]int{}
	var lines []string
	for ev := range events {
		lines = append(lines, ev.who+": "+ev.line)
		f := strings.Fields(ev.line)
		j, _ := strconv.Atoi(f[1])
		seen[f[0]]++
		switch f[0] {
		case "claimed":
			tok, _ := strconv.ParseUint(f[2], 10, 64)
			if claimed[j] == nil {
				claimed[j] = map[string]uint64{}
				fmt.Fprintf(procs[other[ev.who]].in, "go %d\n", j) // taken: the other one may try
			}
			claimed[j][ev.who] = tok
		case "completed":
			fmt.Fprintf(procs[other[ev.who]].in, "resume %d\n", j) // the paused one wakes up
		}
	}
	for who, c := range procs {
		require.NoError(t, c.cmd.Wait(), "process %s", who)
	}
	t.Logf("events: %v", seen)
	require.Equal(t, map[string]int{"claimed": 2 * keys, "wrote": keys, "refused": keys, "completed": keys, "fenced": keys}, seen, "%s", strings.Join(lines, "\n"))
	for j := range keys {
		paused, taker := "a", "b"
		if j%2 == 1 {
			paused, taker = "b", "a"
		}
		require.Greater(t, claimed[j][taker], claimed[j][paused], "job %d: the takeover's token is greater", j)
		require.Contains(t, lines, fmt.Sprintf("%s: refused %d %d %d", paused, j, claimed[j][taker], claimed[j][paused]))
		var writer string
		var token int64
		require.NoError(t, pool.QueryRow(ctx, "SELECT writer, token FROM "+userTable(schema, "out")+" WHERE job = $1", j).Scan(&writer, &token))
		require.Equal(t, taker, writer, "job %d: the late write was refused", j)
		require.Equal(t, int64(claimed[j][taker]), token)
		res, err := s.Apply(ctx, oncekv.Request{Handler: "jobs", Key: strconv.Itoa(j)}, nil)
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, taker, string(res.Response), "job %d: the mark holds the taker's result", j)
	}
}
