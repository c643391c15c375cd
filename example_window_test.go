package oncekv_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/oncekv/oncekv"
)

// With TombstoneRetention, a duplicate that comes after Retention is still
// suppressed, from a tombstone that keeps only that the key was applied:
// the effect does not run again, and the result says the stored response
// has expired.
func ExampleOptions_tombstoneRetention() {
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	db, cleanup := openExample(&oncekv.Options{
		Now:                func() time.Time { return clock },
		Retention:          12 * time.Hour,
		TombstoneRetention: 30 * 24 * time.Hour,
		ExpireInterval:     -1, // Expire is called below
	})
	defer cleanup()
	ctx := context.Background()
	req := oncekv.Request{Handler: "ship", Key: "parcel-7", Payload: []byte("to Ann")}
	ship := func(*oncekv.Tx) ([]byte, error) {
		fmt.Println("shipped")
		return []byte("tracking 1Z999"), nil
	}

	if _, err := db.Apply(ctx, req, ship); err != nil {
		log.Fatal(err)
	}
	clock = clock.Add(20 * time.Hour) // a redelivery, 20 hours late
	if _, err := db.Expire(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := db.Apply(ctx, req, ship)
	fmt.Printf("duplicate %v, response expired %v, response %q, err %v\n", res.Duplicate, res.ResponseExpired, res.Response, err)
	fmt.Println("tombstones:", db.Stats().Tombstones)
	// Output:
	// shipped
	// duplicate true, response expired true, response "", err <nil>
	// tombstones: 1
}

// Each duplicate's age (its time less its key's first delivery) goes into
// a histogram per handler: in Stats since Open, and in the report a clean
// Close keeps for `oncekv advise`. Duplicates that come close to Retention
// say the window is too short before any is lost.
func ExampleDB_WindowReport() {
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	db, cleanup := openExample(&oncekv.Options{Now: func() time.Time { return clock }, Retention: 24 * time.Hour})
	defer cleanup()
	ctx := context.Background()
	orders := []oncekv.Request{{Handler: "pay", Key: "order-1"}, {Handler: "pay", Key: "order-2"}, {Handler: "pay", Key: "order-3"}}
	for _, req := range orders {
		if _, err := db.Apply(ctx, req, nil); err != nil {
			log.Fatal(err)
		}
	}
	start := clock
	for i, late := range []time.Duration{time.Minute, 2 * time.Minute, 20 * time.Hour} {
		clock = start.Add(late)
		if _, err := db.Apply(ctx, orders[i], nil); err != nil { // the redelivery
			log.Fatal(err)
		}
	}
	r := db.WindowReport()
	ages := r.Handlers["pay"].DuplicateAges
	fmt.Println("duplicates:", ages.Count)
	fmt.Println("p50 at most:", ages.Quantile(0.5))
	fmt.Println("latest:", ages.Max, "of a Retention of", r.Retention)
	// Output:
	// duplicates: 3
	// p50 at most: 5m0s
	// latest: 20h0m0s of a Retention of 24h0m0s
}
