package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "oncekv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := oncekv.Open(filepath.Join(dir, "app.db"), nil) // nil: all defaults
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	err = db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("greetings"))
		if err != nil {
			return err
		}
		return b.Put([]byte("en"), []byte("hello"))
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = db.View(func(tx *oncekv.Tx) error {
		fmt.Println(string(tx.Bucket([]byte("greetings")).Get([]byte("en"))))
		return nil
	})
	// Output: hello
}

func ExampleDB_Apply() {
	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// A non-idempotent effect: it adds to a balance. Apply makes it safe to
	// run for every delivery of the message, however many there are.
	credit := func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("balances"))
		if err != nil {
			return nil, err
		}
		balance := len(b.Get([]byte("alice"))) + 1 // one byte per credit, to keep it short
		if err := b.Put([]byte("alice"), make([]byte, balance)); err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, "balance=%d", balance), nil
	}

	req := oncekv.Request{Handler: "credit", Key: "msg-0001", Payload: []byte(`{"to":"alice"}`)}
	for delivery := 1; delivery <= 3; delivery++ { // the broker delivers it three times
		res, err := db.Apply(context.Background(), req, credit)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("delivery %d: %s duplicate=%v\n", delivery, res.Response, res.Duplicate)
	}

	// The same key with another payload is a caller's bug, not a retry.
	req.Payload = []byte(`{"to":"mallory"}`)
	_, err = db.Apply(context.Background(), req, credit)
	fmt.Println(errors.Is(err, oncekv.ErrKeyReuse))
	// Output:
	// delivery 1: balance=1 duplicate=false
	// delivery 2: balance=1 duplicate=true
	// delivery 3: balance=1 duplicate=true
	// true
}

func ExampleDB_ApplyBatch() {
	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// One poll of a consumer: msg-2 was delivered twice in the same poll.
	polled := []oncekv.Request{
		{Handler: "audit", Key: "msg-1", Payload: []byte("login")},
		{Handler: "audit", Key: "msg-2", Payload: []byte("logout")},
		{Handler: "audit", Key: "msg-2", Payload: []byte("logout")},
	}
	results, err := db.ApplyBatch(context.Background(), polled, func(tx *oncekv.Tx, i int) ([]byte, error) {
		log, err := tx.CreateBucketIfNotExists([]byte("audit-log"))
		if err != nil {
			return nil, err
		}
		return nil, log.Put([]byte(polled[i].Key), polled[i].Payload) // an append: not idempotent
	})
	if err != nil {
		log.Fatal(err) // the whole batch failed; commit the offsets only on success
	}
	for i, r := range results {
		fmt.Printf("%s: err=%v duplicate=%v\n", polled[i].Key, r.Err, r.Duplicate)
	}
	// Output:
	// msg-1: err=<nil> duplicate=false
	// msg-2: err=<nil> duplicate=false
	// msg-2: err=<nil> duplicate=true
}
