package oncekv_test

import (
	"context"
	"fmt"
	"log"

	"github.com/oncekv/oncekv"
)

// One consumer goroutine hands the store each message as it arrives and
// acknowledges it to the broker from done, which runs once the message's
// commit is durable, in the order the messages came: the messages that
// arrive while one commit runs share the next, instead of each waiting
// for its own fsync.
func ExampleDB_NewApplier() {
	db, cleanup := openExample(nil)
	defer cleanup()
	a, err := db.NewApplier(oncekv.ApplierOptions{MaxInFlight: 64})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	count := func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return nil, err
		}
		n := len(b.Get([]byte("count"))) + 1 // one byte per order, to keep it short
		return fmt.Appendf(nil, "order #%d", n), b.Put([]byte("count"), make([]byte, n))
	}
	ack := func(id string) func(oncekv.Result, error) {
		return func(res oncekv.Result, err error) {
			if err != nil {
				fmt.Println("nak", id, err) // the broker redelivers it
				return
			}
			fmt.Printf("ack %s: %s duplicate=%v\n", id, res.Response, res.Duplicate)
		}
	}
	ctx := context.Background()
	for _, id := range []string{"m1", "m2", "m1", "m3"} { // m1 is delivered twice
		req := oncekv.Request{Handler: "orders", Key: id}
		if err := a.Submit(ctx, req, count, ack(id)); err != nil {
			log.Fatal(err) // ctx ended or the Applier closed: not taken, no done
		}
	}
	if err := a.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// ack m1: order #1 duplicate=false
	// ack m2: order #2 duplicate=false
	// ack m1: order #1 duplicate=true
	// ack m3: order #3 duplicate=false
}
