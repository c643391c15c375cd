package oncekvtest_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/oncekvtest"
)

// Buckets is the default Snapshot: every user bucket, readable, as the
// failures print it.
func ExampleBuckets() {
	dir, err := os.MkdirTemp("", "oncekvtest-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "example.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		if err := b.Put([]byte("42"), []byte("paid")); err != nil {
			return err
		}
		return b.PutFenced([]byte("43"), []byte("shipped"), 3)
	})
	if err != nil {
		log.Fatal(err)
	}
	st, err := oncekvtest.Buckets(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	names := make([]string, 0, len(st))
	for name := range st {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Printf("%s = %s\n", name, st[name])
	}
	// Output:
	// orders/42 = "paid"
	// orders/43 = "shipped" fence=3
}
