package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// The examples run against the PostgreSQL of ONCEKV_PG_DSN, each in a
// schema of its own; TestExamples runs the same code and checks what it
// prints (an Example with an Output comment would run without a
// database, where there is none).

// example runs body against the PostgreSQL of ONCEKV_PG_DSN, printing
// its error if any.
func example(schema string, body func(context.Context, *pgxpool.Pool, string) error) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("ONCEKV_PG_DSN"))
	if err == nil {
		defer pool.Close()
		err = body(ctx, pool, schema)
	}
	if err != nil {
		fmt.Println(err)
	}
}

// Example opens a store and applies a deposit twice: the second delivery
// is a duplicate, and the balance moved once.
func Example() {
	example("oncekv_example", deposit)
}

// deposit is Example's body.
func deposit(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	store, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	defer store.Close()
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+accounts+" (id text PRIMARY KEY, balance int NOT NULL)"); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+accounts+" VALUES ('alice', 0) ON CONFLICT DO NOTHING"); err != nil {
		return err
	}
	msg := oncekv.Request{Handler: "deposit", Key: "msg-42", Payload: []byte(`{"account":"alice","amount":100}`)}
	for delivery := 1; delivery <= 2; delivery++ { // the broker delivers it twice
		res, err := store.Apply(ctx, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			// Not idempotent, and it need not be: it commits with the mark.
			_, err := tx.Exec(ctx, "UPDATE "+accounts+" SET balance = balance + 100 WHERE id = 'alice'")
			return []byte("deposited"), err
		})
		if err != nil {
			return err // oncekv.Classify(err) says whether to retry
		}
		fmt.Printf("delivery %d: %s, duplicate %v\n", delivery, res.Response, res.Duplicate)
	}
	var balance int
	if err := pool.QueryRow(ctx, "SELECT balance FROM "+accounts+" WHERE id = 'alice'").Scan(&balance); err != nil {
		return err
	}
	fmt.Println("balance:", balance)
	return nil
}

// ExampleStore_Claim charges a card once: the claim holds the key while
// the gateway is called (with the claim's Key to deduplicate on and its
// Token to fence a zombie off), and Complete records the receipt.
func ExampleStore_Claim() {
	example("oncekv_example_claim", charge)
}

// gateway stands for a payment gateway that deduplicates on the
// idempotency key it is given.
func gateway(idempotencyKey string, token uint64) ([]byte, error) {
	return []byte("receipt for " + idempotencyKey[:8]), nil
}

// charge is ExampleStore_Claim's body.
func charge(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	store, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	defer store.Close()
	req := oncekv.Request{Handler: "billing", Key: "order-7"}
	c, err := store.Claim(ctx, req, 30*time.Second)
	var busy *oncekv.InProgressError
	switch {
	case errors.As(err, &busy):
		fmt.Println("another host holds it; retry in", busy.RetryAfter(store.Now()))
		return nil
	case err != nil:
		return err
	case c.Done():
		fmt.Printf("already charged: %s\n", c.Result().Response)
		return nil
	}
	receipt, err := gateway(c.Key(), c.Token())
	if err != nil {
		return c.Fail(ctx, err) // released at once, unless oncekv.Permanent(err)
	}
	res, err := c.Complete(ctx, receipt, nil)
	if err != nil {
		return err // oncekv.ErrFenced: another host took over; give up
	}
	fmt.Printf("charged: %s\n", res.Response)
	again, err := store.Claim(ctx, req, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("a retry: done %v, %s\n", again.Done(), again.Result().Response)
	return nil
}

// ExampleStore_AdvanceFence fences the writes of a leader to its own
// table: a token from NextFence recorded in the writer's transaction
// refuses a writer that took its token earlier and comes late.
func ExampleStore_AdvanceFence() {
	example("oncekv_example_fence", fenced)
}

// fenced is ExampleStore_AdvanceFence's body.
func fenced(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	store, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	defer store.Close()
	config := pgx.Identifier{schema, "config"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+config+" (k text PRIMARY KEY, v text NOT NULL)"); err != nil {
		return err
	}
	write := func(fence uint64, value string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := store.AdvanceFence(ctx, tx, "config/limits", fence); err != nil {
				return err // a *oncekv.FenceError: a newer writer wrote
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+config+" VALUES ('limits', $1) ON CONFLICT (k) DO UPDATE SET v = excluded.v", value)
			return err
		})
	}
	old, err := store.NextFence(ctx, "config/limits") // a leader that then stalls
	if err != nil {
		return err
	}
	current, err := store.NextFence(ctx, "config/limits") // the next leader
	if err != nil {
		return err
	}
	if err := write(current, "v2"); err != nil {
		return err
	}
	err = write(old, "v1")
	fmt.Println("the stale leader's write:", errors.Is(err, oncekv.ErrFenced))
	return nil
}

// ExampleStore_ApplyBatch applies one poll of messages in one
// transaction; the redelivered one runs no effect.
func ExampleStore_ApplyBatch() {
	example("oncekv_example_batch", poll)
}

// poll is ExampleStore_ApplyBatch's body.
func poll(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	store, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	defer store.Close()
	events := pgx.Identifier{schema, "events"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+events+" (id text PRIMARY KEY)"); err != nil {
		return err
	}
	msgs := []oncekv.Request{{Handler: "ingest", Key: "e-1"}, {Handler: "ingest", Key: "e-2"}, {Handler: "ingest", Key: "e-1"}}
	results, err := store.ApplyBatch(ctx, msgs, func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error) {
		_, err := tx.Exec(ctx, "INSERT INTO "+events+" VALUES ($1)", msgs[i].Key)
		return nil, err
	})
	if err != nil {
		return err
	}
	for i, r := range results {
		fmt.Printf("%s: duplicate %v, error %v\n", msgs[i].Key, r.Duplicate, r.Err)
	}
	return nil
}
