package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// Example shows a producer, a consumer that acks in its own transaction,
// and a duplicate enqueue.
func Example() {
	db, q, done := exampleQueue("uploads")
	defer done()
	ctx := context.Background()

	// The producer retries: the key makes the second enqueue a no-op.
	id1, _ := q.Enqueue(ctx, queue.Message{Key: "evt-17", Body: []byte("photo.jpg")})
	id2, _ := q.Enqueue(ctx, queue.Message{Key: "evt-17", Body: []byte("photo.jpg")})
	fmt.Println("same id:", id1 == id2)

	// The consumer: its effect and the ack commit together.
	m, err := q.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	err = db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("thumbnails"))
		if err != nil {
			return err
		}
		if err := b.Put(m.Body, []byte("done")); err != nil {
			return err
		}
		return q.AckTx(tx, m)
	})
	fmt.Println("attempt", m.Attempt, "acked:", err == nil)
	st, _ := q.Stats()
	fmt.Println("depth:", st.Depth)
	// Output:
	// same id: true
	// attempt 1 acked: true
	// depth: 0
}

// ExampleQueue_EnqueueTx is the transactional outbox: the message exists
// if and only if Apply's effect committed.
func ExampleQueue_EnqueueTx() {
	db, outbox, done := exampleQueue("outbox")
	defer done()
	ctx := context.Background()

	place := func(tx *oncekv.Tx) ([]byte, error) {
		orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return nil, err
		}
		if err := orders.Put([]byte("o-1"), []byte("placed")); err != nil {
			return nil, err
		}
		_, err = outbox.EnqueueTx(tx, queue.Message{Key: "order-placed/o-1", Body: []byte("o-1")})
		return nil, err
	}
	for range 3 { // the request is delivered three times
		if _, err := db.Apply(ctx, oncekv.Request{Handler: "place-order", Key: "o-1"}, place); err != nil {
			log.Fatal(err)
		}
	}
	st, _ := outbox.Stats()
	fmt.Println("messages in the outbox:", st.Depth)
	// Output:
	// messages in the outbox: 1
}

// ExampleQueue_Nack shows a permanent failure going to the dead letters,
// and a redrive with the original key.
func ExampleQueue_Nack() {
	_, q, done := exampleQueue("emails")
	defer done()
	ctx := context.Background()

	_, _ = q.Enqueue(ctx, queue.Message{Key: "welcome/42", Body: []byte("bad address")})
	m, _ := q.Receive(ctx)
	_ = q.Nack(ctx, m, oncekv.Permanent(errors.New("550 no such user")))

	dead, _ := q.DeadLetters(0, 10)
	fmt.Println(dead[0].Key, "-", dead[0].LastError)
	if _, err := q.Redrive(ctx, dead[0].ID); err != nil {
		log.Fatal(err)
	}
	m, _ = q.Receive(ctx)
	fmt.Println("redriven:", m.Key, "attempt", m.Attempt)
	// Output:
	// welcome/42 - 550 no such user
	// redriven: welcome/42 attempt 1
}

// queueGuide is the code block of docs/queue.md, verbatim (the root's
// TestDocsCodeBlocks compares them); Example_guide runs it.
func queueGuide(ctx context.Context, db *oncekv.DB, req oncekv.Request, body []byte, cause error) error {
	q, err := queue.Open(db, "uploads", nil) // Visibility 30s, MaxAttempts 10
	if err != nil {
		return err
	}
	defer q.Close()
	if _, err := q.Enqueue(ctx, queue.Message{Key: "evt-17", Body: body}); err != nil { // same key again: same id, nothing added
		return err
	}

	// The outbox: the message exists iff the effect committed.
	_, err = db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
		_, err := q.EnqueueTx(tx, queue.Message{Key: "order-placed/o-1", Body: body})
		return nil, err
	})
	if err != nil {
		return err
	}

	m, err := q.Receive(ctx) // blocks until one is visible; m.Attempt, m.Token (fencing), m.Key
	if err != nil {
		return err
	}
	err = db.Update(func(tx *oncekv.Tx) error {
		// ... the consumer's own writes ...
		return q.AckTx(tx, m) // committed with them, or neither
	})
	if err != nil {
		return err
	}
	fmt.Println("acked:", m.Key)

	m, err = q.Receive(ctx)
	if err != nil {
		return err
	}
	if err := q.Nack(ctx, m, oncekv.Permanent(cause)); err != nil { // dead letter now
		return err
	}
	dead, err := q.DeadLetters(0, 100) // key, body, attempts and last error kept
	if err != nil {
		return err
	}
	if _, err := q.Redrive(ctx, dead[0].ID); err != nil { // the same key: applied once
		return err
	}
	m, err = q.Receive(ctx)
	if err != nil {
		return err
	}
	fmt.Println("redriven:", m.Key, "attempt", m.Attempt)
	return q.Nack(ctx, m, retry.After(time.Minute, cause)) // backoff, and not within the minute
}

// Example_guide runs docs/queue.md's code: a message acked with the
// consumer's writes, an outbox message dead-lettered and redriven with its
// key, then nacked with a Retry-After.
func Example_guide() {
	dir, err := os.MkdirTemp("", "queue-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	req := oncekv.Request{Handler: "place-order", Key: "o-1"}
	if err := queueGuide(context.Background(), db, req, []byte("photo.jpg"), errors.New("550 no such user")); err != nil {
		log.Fatal(err)
	}
	q, err := queue.Open(db, "uploads", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	st, err := q.Stats()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("delayed:", st.Delayed, "dead:", st.Dead)
	// Output:
	// acked: evt-17
	// redriven: order-placed/o-1 attempt 1
	// delayed: 1 dead: 0
}

// exampleQueue opens a store in a temporary directory and the queue name
// in it; done closes both and removes the directory.
func exampleQueue(name string) (*oncekv.DB, *queue.Queue, func()) {
	dir, err := os.MkdirTemp("", "queue-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := oncekv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	q, err := queue.Open(db, name, nil)
	if err != nil {
		log.Fatal(err)
	}
	return db, q, func() {
		_ = q.Close()
		_ = db.Close()
		_ = os.RemoveAll(dir)
	}
}

// ExampleQueue_WaitDrained is the sync badge and its "all synced" tick: the
// count of messages waiting, read at each change, and a wait until none is
// left; nothing is polled.
func ExampleQueue_WaitDrained() {
	_, q, done := exampleQueue("sync")
	defer done()
	ctx := context.Background()
	for _, k := range []string{"edit-1", "edit-2"} {
		_, _ = q.Enqueue(ctx, queue.Message{Key: k, Body: []byte(k), OrderingKey: "note-7"})
	}
	st, _ := q.Stats()
	fmt.Println("changes waiting to sync:", st.Depth)

	changed := q.Changed()
	go func() { // the consumer
		for range 2 {
			m, err := q.Receive(ctx)
			if err != nil {
				return
			}
			_ = q.Ack(ctx, m)
		}
	}()
	<-changed // the first delivery or ack: read the badge again
	if err := q.WaitOrderingKeyDrained(ctx, "note-7"); err != nil {
		log.Fatal(err)
	}
	if err := q.WaitDrained(ctx); err != nil {
		log.Fatal(err)
	}
	st, _ = q.Stats()
	fmt.Println("all synced:", st.Depth == 0)
	// Output:
	// changes waiting to sync: 2
	// all synced: true
}

// ExampleNewView reads a queue without opening it (an operator's tool, or
// a store opened read-only): its gauges and its dead letters.
func ExampleNewView() {
	db, q, done := exampleQueue("mail")
	defer done()
	ctx := context.Background()
	_, _ = q.Enqueue(ctx, queue.Message{Key: "welcome/1", Body: []byte("hi")})
	m, _ := q.Receive(ctx)
	_ = q.Nack(ctx, m, oncekv.Permanent(errors.New("550 no such user")))

	names, _ := queue.Names(db)
	v, err := queue.NewView(db, names[0])
	if err != nil {
		log.Fatal(err)
	}
	st, _ := v.Stats()
	dead, _ := v.DeadLetters(0, 10)
	fmt.Println(v.Name(), "depth", st.Depth, "dead", st.Dead, "-", dead[0].Key, dead[0].LastError)
	// Output:
	// mail depth 0 dead 1 - welcome/1 550 no such user
}
