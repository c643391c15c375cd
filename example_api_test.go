package oncekv_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/oncekv/oncekv"
)

// A consumer decides what to do with each message from one function: the
// 33 KB id goes to the dead letters instead of looping, the message another
// worker holds comes back when that worker's lease ends.
func ExampleClassify() {
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	db, cleanup := openExample(&oncekv.Options{Now: func() time.Time { return clock }})
	defer cleanup()
	ctx := context.Background()
	if _, err := db.Claim(ctx, oncekv.Request{Handler: "pay", Key: "busy"}, 30*time.Second); err != nil {
		log.Fatal(err)
	}

	for _, key := range []string{"m-1", strings.Repeat("x", 33<<10), "busy"} {
		_, err := db.Apply(ctx, oncekv.Request{Handler: "pay", Key: key}, nil)
		switch advice := oncekv.Classify(err); advice.Action {
		case oncekv.Ack:
			fmt.Println("ack")
		case oncekv.RetryLater:
			fmt.Println("nak, redeliver in", advice.NotBefore.Sub(db.Now()))
		case oncekv.GiveUp:
			fmt.Println("dead letter:", strings.Contains(err.Error(), "too large"))
		default:
			fmt.Println(advice.Action)
		}
	}
	// Output:
	// ack
	// dead letter: true
	// nak, redeliver in 30s
}

// Support asks whether a message was processed, when, and with what answer.
func ExampleDB_Mark() {
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	db, cleanup := openExample(&oncekv.Options{Now: func() time.Time { return clock }})
	defer cleanup()
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: "deposit", Key: "d-7"},
		func(*oncekv.Tx) ([]byte, error) { return []byte(`{"balance":100}`), nil })
	if err != nil {
		log.Fatal(err)
	}
	info, err := db.Mark("deposit", "d-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.State, info.FirstSeen.UTC().Format(time.RFC3339), string(info.Response))
	_, err = db.Mark("deposit", "d-8")
	fmt.Println(err)
	// Output:
	// DONE 2025-03-01T12:00:00Z {"balance":100}
	// oncekv: mark handler "deposit" key "d-8": no mark for the key
}

// A backup of a live store is itself a store: open it to restore, or, as
// here, read it while nobody writes.
func ExampleDB_BackupFile() {
	db, cleanup := openExample(nil)
	defer cleanup()
	if _, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, nil); err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "oncekv-backup")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "backup.db")
	if _, err := db.BackupFile(path); err != nil {
		log.Fatal(err)
	}

	ro, err := oncekv.Open(path, &oncekv.Options{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer ro.Close()
	res, err := ro.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, nil)
	fmt.Println("duplicate:", res.Duplicate, err)
	_, err = ro.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "new"}, nil)
	fmt.Println("new key refused:", oncekv.Classify(err).Action)
	// Output:
	// duplicate: true <nil>
	// new key refused: reopen
}
