package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/oncekv/oncekv"
)

// Example is the question an operator asks most, "was this message
// processed, when, with what result?", as "oncekv mark PATH HANDLER KEY"
// answers it on a store that a program closed.
func Example() {
	dir, err := os.MkdirTemp("", "oncekv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "app.db")
	processed := time.Date(2024, 5, 1, 10, 5, 0, 0, time.UTC)
	db, err := oncekv.Open(path, &oncekv.Options{Now: func() time.Time { return processed }})
	if err != nil {
		log.Fatal(err)
	}
	req := oncekv.Request{Handler: "pay", Key: "order-1", Payload: []byte("100 EUR")}
	if _, err := db.Apply(context.Background(), req, func(*oncekv.Tx) ([]byte, error) { return []byte("ok"), nil }); err != nil {
		log.Fatal(err)
	}
	if err := db.Close(); err != nil {
		log.Fatal(err)
	}

	code := run([]string{"mark", path, "pay", "order-1", "-now", "2024-05-01T11:00:00Z"}, os.Stdout, os.Stderr)
	fmt.Println("exit code", code)
	// Output:
	// handler      "pay"
	// key          "order-1"
	// state        DONE
	// first seen   2024-05-01T10:05:00Z
	// window       2024-05-01T10:00:00Z
	// fingerprint  bcb6034fa833b523edd35f8a13014e28
	// response     "ok"
	// token        0
	// claim key    477e9c39f0185bc6f61c785556974084cab11aba6cd8bd32f1093b7638c320db
	// exit code 0
}
