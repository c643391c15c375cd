package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// The gateway of the probe's crash test is the user table charges: a
// charge is a row written outside any claim's transaction (as an HTTP
// call would be), with no key of its own, so that nothing stops a second
// charge of an order but the store and the probe.
const (
	chargeOrders = 3
	chargeLease  = time.Second
)

func chargeReq(round, i int) oncekv.Request {
	k := fmt.Sprintf("r%d-order-%d", round, i)
	return oncekv.Request{Handler: "charge", Key: k, Payload: []byte("100 EUR " + k)}
}

// gatewayProbe asks the gateway's ledger whether the attempt in doubt
// charged, by the claim key it handed over.
func gatewayProbe(pool *pgxpool.Pool, schema string) *oncekv.ClaimOptions {
	q := "SELECT count(*) FROM " + userTable(schema, "charges") + " WHERE claim_key = $1"
	return &oncekv.ClaimOptions{Probe: func(ctx context.Context, key string, _ oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		var n int
		if err := pool.QueryRow(ctx, q, key).Scan(&n); err != nil {
			return oncekv.OutcomeUnknown, nil, err
		}
		if n > 0 {
			return oncekv.OutcomeApplied, []byte("receipt"), nil
		}
		return oncekv.OutcomeNotApplied, nil, nil
	}}
}

// chargeAll charges the round's orders, one by one, with the probe on
// takeover: claim, charge at the gateway, Complete. step is called after
// each stage with its name ("claimed", "charged", "completed", "done" for
// an order found done) and the order's index, and may stop the run there.
func chargeAll(ctx context.Context, s *postgres.Store, pool *pgxpool.Pool, schema string, round int, step func(string, int) error) error {
	charge := "INSERT INTO " + userTable(schema, "charges") + " (claim_key, order_key) VALUES ($1, $2)"
	opts := gatewayProbe(pool, schema)
	for i := range chargeOrders {
		r := chargeReq(round, i)
		var c *postgres.Claim
		var err error
		for {
			c, err = s.ClaimWith(ctx, r, chargeLease, opts)
			if !errors.Is(err, oncekv.ErrInProgress) {
				break
			}
			time.Sleep(50 * time.Millisecond) // the dead worker's lease
		}
		switch {
		case err != nil:
			return err
		case c.Done():
			if err := step("done", i); err != nil {
				return err
			}
			continue
		}
		if err := step("claimed", i); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, charge, c.Key(), r.Key); err != nil {
			return err
		}
		if err := step("charged", i); err != nil {
			return err
		}
		if _, err := c.Complete(ctx, []byte("receipt"), nil); err != nil {
			return err
		}
		if err := step("completed", i); err != nil {
			return err
		}
	}
	return nil
}

// chargeWorker is a child of TestProbeAcrossKilledProcesses: it charges
// round ONCEKV_PG_ROUND's orders, printing each stage and waiting for a
// line on stdin before going on, so that the test can SIGKILL it between
// any two stages.
func chargeWorker(ctx context.Context, s *postgres.Store, pool *pgxpool.Pool) error {
	round, _ := strconv.Atoi(os.Getenv("ONCEKV_PG_ROUND"))
	in := bufio.NewScanner(os.Stdin)
	err := chargeAll(ctx, s, pool, os.Getenv("ONCEKV_PG_SCHEMA"), round, func(stage string, i int) error {
		fmt.Println(stage, i)
		if !in.Scan() {
			return errors.New("stdin closed")
		}
		return nil
	})
	if err == nil {
		fmt.Println("finished")
	}
	return err
}

// TestProbeAcrossKilledProcesses: a worker process claims an order,
// charges a gateway that does not deduplicate, and is SIGKILLed at a
// random stage (before or after its charge, before its Complete); another
// process takes the key over once the lease has run out, and its probe
// asks the gateway's ledger: an order the dead worker charged is recorded
// DONE without a second charge, one it did not is charged now. Every
// order is charged exactly once: no double, no loss.
func TestProbeAcrossKilledProcesses(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	schema := freshSchema(t, pool)
	s := openStore(t, pool, postgres.Options{Schema: schema})
	_, err := pool.Exec(ctx, "CREATE TABLE "+userTable(schema, "charges")+" (claim_key text NOT NULL, order_key text NOT NULL)")
	require.NoError(t, err)
	rounds := 8
	if testing.Short() {
		rounds = 3
	}
	rng := rand.New(rand.NewPCG(7, 24))
	stages := []string{"claimed", "charged"}
	var killedAfterCharge int
	for round := range rounds {
		victim, at := rng.IntN(chargeOrders), stages[rng.IntN(len(stages))]
		if round < len(stages) {
			at = stages[round] // each stage at least once
		}
		c := startChild(t, "charge", schema, "ONCEKV_PG_ROUND="+strconv.Itoa(round))
		want := fmt.Sprintf("%s %d", at, victim)
		killed := false
		for !killed && c.out.Scan() {
			if c.out.Text() == want {
				require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
				_ = c.cmd.Wait() // killed
				killed = true
				break
			}
			_, err := fmt.Fprintln(c.in, "go")
			require.NoError(t, err)
		}
		require.True(t, killed, "the child reached %q", want)
		if at == "charged" {
			killedAfterCharge++
		}
		// Another process (this one) takes over once the lease ran out.
		require.NoError(t, chargeAll(ctx, s, pool, schema, round, func(string, int) error { return nil }))
	}
	rows, err := pool.Query(ctx, "SELECT order_key, count(*) FROM "+userTable(schema, "charges")+" GROUP BY order_key")
	require.NoError(t, err)
	charges := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		require.NoError(t, rows.Scan(&k, &n))
		charges[k] = n
	}
	require.NoError(t, rows.Err())
	doubles, lost := 0, 0
	for round := range rounds {
		for i := range chargeOrders {
			r := chargeReq(round, i)
			switch n := charges[r.Key]; {
			case n == 0:
				lost++
			case n > 1:
				doubles++
			}
			res, err := s.Apply(ctx, r, nil)
			require.NoError(t, err)
			require.True(t, res.Duplicate)
			require.Equal(t, "receipt", string(res.Response))
		}
	}
	st := s.Stats()
	t.Logf("rounds %d, SIGKILLs %d (%d after the charge), takeovers %d, probe applied %d, double charges %d, lost charges %d",
		rounds, rounds, killedAfterCharge, st.Takeovers, st.ProbeApplied, doubles, lost)
	require.Zero(t, doubles, "double charges")
	require.Zero(t, lost, "lost charges")
	require.Equal(t, uint64(rounds), st.Takeovers, "one takeover per killed worker")
	require.Equal(t, uint64(killedAfterCharge), st.ProbeApplied, "each charge the dead worker made was found by the probe")
}
