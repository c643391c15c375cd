package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/oncekv/oncekv"
)

// openExample opens a store in a fresh temporary directory and returns it
// with the function that removes it all.
func openExample(opts *oncekv.Options) (*oncekv.DB, func()) {
	dir, err := os.MkdirTemp("", "oncekv-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := oncekv.Open(filepath.Join(dir, "app.db"), opts)
	if err != nil {
		log.Fatal(err)
	}
	return db, func() {
		db.Close()
		os.RemoveAll(dir)
	}
}

// An e-mail cannot join the store's transaction, so it is sent under a
// claim. The mail service gets the claim's Key, on which it deduplicates,
// and its Token, on which it fences. Worker A sends and stalls past its
// lease before Complete; worker B takes the key over and sends again with
// the same Key, which the mail service recognises; A's late Complete is
// refused. One e-mail goes out.
func ExampleDB_Claim() {
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	db, cleanup := openExample(&oncekv.Options{Now: func() time.Time { return clock }})
	defer cleanup()
	ctx := context.Background()
	req := oncekv.Request{Handler: "email", Key: "welcome-42", Payload: []byte("to=ann@example.com")}

	// send stands for the mail service: it keeps one receipt per
	// idempotency key and refuses a token older than the newest it saw.
	receipts, newest, sent := map[string]string{}, map[string]uint64{}, 0
	send := func(key string, token uint64) ([]byte, error) {
		if token < newest[key] {
			return nil, fmt.Errorf("token %d is stale", token)
		}
		newest[key] = token
		if _, ok := receipts[key]; !ok {
			sent++
			receipts[key] = fmt.Sprintf("mail #%d", sent)
		}
		return []byte(receipts[key]), nil
	}

	a, err := db.Claim(ctx, req, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := send(a.Key(), a.Token()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker A sends with token", a.Token(), "and stalls")

	clock = clock.Add(45 * time.Second) // past A's lease
	b, err := db.Claim(ctx, req, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	receipt, err := send(b.Key(), b.Token())
	if err != nil {
		log.Fatal(err)
	}
	res, err := b.Complete(ctx, receipt, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("worker B takes over with token %d, same key: %v, completes: %s\n", b.Token(), b.Key() == a.Key(), res.Response)

	_, err = a.Complete(ctx, receipt, nil) // A wakes up
	fmt.Println("worker A is fenced off:", errors.Is(err, oncekv.ErrFenced))

	// A redelivery of the message gets the stored result, and sends nothing.
	again, err := db.Claim(ctx, req, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("redelivery: done=%v %s; e-mails sent: %d\n", again.Done(), again.Result().Response, sent)
	// Output:
	// worker A sends with token 1 and stalls
	// worker B takes over with token 2, same key: true, completes: mail #1
	// worker A is fenced off: true
	// redelivery: done=true mail #1; e-mails sent: 1
}

// Two writers set the same key. The first takes its token, stalls, and
// arrives after the second: the fence refuses its stale write.
func ExampleBucket_PutFenced() {
	db, cleanup := openExample(nil)
	defer cleanup()
	set := func(value string, fence uint64) error {
		return db.Update(func(tx *oncekv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("config"))
			if err != nil {
				return err
			}
			return b.PutFenced([]byte("x"), []byte(value), fence)
		})
	}

	next := func() uint64 {
		token, err := db.NextFence("config/x") // durable before it is returned
		if err != nil {
			log.Fatal(err)
		}
		return token
	}

	first, second := next(), next()
	if err := set("2", second); err != nil {
		log.Fatal(err)
	}
	err := set("1", first) // after a GC pause: too late
	var fe *oncekv.FenceError
	if errors.As(err, &fe) {
		fmt.Printf("refused: stored fence %d, presented %d\n", fe.Stored, fe.Presented)
	}
	_ = db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("config"))
		fmt.Printf("x = %s, fence %d\n", b.Get([]byte("x")), b.Fence([]byte("x")))
		return nil
	})
	// Output:
	// refused: stored fence 2, presented 1
	// x = 2, fence 2
}

// Read-modify-write without holding the write lock across the computation:
// read the value and its version, compute, and write only if nobody wrote
// the key in between.
func ExampleBucket_PutIfVersion() {
	db, cleanup := openExample(nil)
	defer cleanup()
	counter := []byte("visits")
	increment := func() error {
		for {
			var n int
			var version uint64
			_ = db.View(func(tx *oncekv.Tx) error {
				if b := tx.Bucket([]byte("stats")); b != nil {
					n, version = len(b.Get(counter)), b.Version(counter)
				}
				return nil
			})
			err := db.Update(func(tx *oncekv.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("stats"))
				if err != nil {
					return err
				}
				return b.PutIfVersion(counter, make([]byte, n+1), version) // version 0 creates
			})
			if !errors.Is(err, oncekv.ErrVersionConflict) {
				return err // nil, or an error a retry cannot fix
			}
		}
	}
	for range 3 {
		if err := increment(); err != nil {
			log.Fatal(err)
		}
	}
	_ = db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("stats"))
		fmt.Printf("visits = %d, version %d\n", len(b.Get(counter)), b.Version(counter))
		return nil
	})
	// Output: visits = 3, version 3
}

// A legacy payment API cannot deduplicate on Claim.Key, but it can say
// whether it charged one. Worker A charges and dies before Complete; the
// claim that takes the key over asks the API first, through the probe,
// and finds the charge made: the key is recorded DONE with the API's
// receipt and nobody charges again. When the API cannot tell (its status
// call fails), the key is parked for an operator, who resolves it.
func ExampleDB_ClaimWith() {
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	db, cleanup := openExample(&oncekv.Options{Now: func() time.Time { return clock }})
	defer cleanup()
	ctx := context.Background()

	// charges stands for the payment API's own records, by idempotency
	// key; its status call is down for the keys in down.
	charges, down := map[string]string{}, map[string]bool{}
	probe := &oncekv.ClaimOptions{Probe: func(ctx context.Context, key string, prev oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		switch receipt, charged := charges[key]; {
		case down[key]:
			return oncekv.OutcomeUnknown, nil, nil
		case charged:
			return oncekv.OutcomeApplied, []byte(receipt), nil
		}
		return oncekv.OutcomeNotApplied, nil, nil
	}}

	for _, order := range []string{"order-1", "order-2"} {
		req := oncekv.Request{Handler: "charge", Key: order, Payload: []byte("100 EUR")}
		a, err := db.ClaimWith(ctx, req, time.Minute, probe)
		if err != nil {
			log.Fatal(err)
		}
		charges[a.Key()] = "receipt " + order // charged; then worker A dies before Complete
		down[a.Key()] = order == "order-2"
		clock = clock.Add(2 * time.Minute) // A's lease runs out

		b, err := db.ClaimWith(ctx, req, time.Minute, probe)
		if errors.Is(err, oncekv.ErrParked) {
			fmt.Println(order, "parked:", oncekv.Classify(err).Action)
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		prev, _ := b.TakenOver()
		fmt.Printf("%s: took over token %d, done %v: %s\n", order, prev.Token, b.Done(), b.Result().Response)
	}

	// The operator lists the parked keys, asks the API about each by its
	// claim key, and resolves it.
	err := db.Parked(func(m oncekv.MarkInfo) error {
		fmt.Println("to resolve:", m.Handler, m.Key, "token", m.Token)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.ResolveParked("charge", "order-2", true, []byte("receipt order-2")); err != nil {
		log.Fatal(err)
	}
	res, err := db.Apply(ctx, oncekv.Request{Handler: "charge", Key: "order-2", Payload: []byte("100 EUR")}, nil)
	fmt.Println(string(res.Response), res.Duplicate, err)
	// Output:
	// order-1: took over token 1, done true: receipt order-1
	// order-2 parked: give up
	// to resolve: charge order-2 token 3
	// receipt order-2 true <nil>
}
