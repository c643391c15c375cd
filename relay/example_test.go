package relay_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// Example is an order and its outbox
// entry commit together, and the relay delivers the entry to a receiver
// that is down at first (503 with Retry-After), with the same
// Idempotency-Key on every attempt.
func Example() {
	dir, _ := os.MkdirTemp("", "relay-example")
	defer os.RemoveAll(dir)
	db, _ := oncekv.Open(filepath.Join(dir, "shop.db"), nil)
	defer db.Close()
	q, _ := queue.Open(db, "outbox", &queue.Options{Retry: &retry.Policy{Base: 10 * time.Millisecond, Cap: 10 * time.Millisecond}})
	defer q.Close()

	var mu sync.Mutex
	var keys []string
	delivered := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		if len(keys) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		close(delivered)
	}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	_, err := db.Apply(ctx, oncekv.Request{Handler: "checkout", Key: "order-1", Payload: []byte("2 apples")},
		func(tx *oncekv.Tx) ([]byte, error) {
			// ... the order's own writes ...
			_, err := q.EnqueueTx(tx, queue.Message{Key: "order-1", Body: []byte("2 apples")})
			return nil, err
		})
	if err != nil {
		panic(err)
	}

	send, _ := relay.HTTPSender(nil, http.MethodPost, srv.URL, nil)
	r, _ := relay.New(q, send, nil) // 4 workers; retry budget 10% + 1/s
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	<-delivered
	cancel()
	fmt.Println("Run:", <-done)
	st := r.Stats()
	fmt.Println("keys seen by the receiver:", keys)
	fmt.Println("sent:", st.Sent, "failed:", st.Failed, "retried:", st.Retried)
	// Output:
	// Run: <nil>
	// keys seen by the receiver: [order-1 order-1]
	// sent: 1 failed: 1 retried: 1
}

// outboxGuide is the code block of docs/outbox.md, verbatim (the root's
// TestDocsCodeBlocks compares them); Example_guide runs it.
func outboxGuide(ctx context.Context, db *oncekv.DB, req oncekv.Request, body []byte, url string) error {
	q, err := queue.Open(db, "outbox", nil) // the retry policy lives here
	if err != nil {
		return err
	}
	defer q.Close()
	_, err = db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
		// ... the order's own writes ...
		_, err := q.EnqueueTx(tx, queue.Message{Key: "order-1", Body: body})
		return nil, err // the entry exists iff the order committed
	})
	if err != nil {
		return err
	}

	send, err := relay.HTTPSender(nil, http.MethodPost, url, nil) // Idempotency-Key: the message's key
	if err != nil {
		return err
	}
	r, err := relay.New(q, send, &relay.Options{Workers: 4}) // budget: 10% of first attempts + 1/s
	if err != nil {
		return err
	}
	return r.Run(ctx) // until ctx is done; r.Stats() meanwhile
}

// Example_guide runs docs/outbox.md's code against a receiver that takes
// the order and then stops the relay.
func Example_guide() {
	dir, err := os.MkdirTemp("", "relay-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "shop.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ctx, stop := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("receiver: %s, Idempotency-Key %s\n", body, r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
		stop() // the relay finishes this send, acks it, and returns
	}))
	defer srv.Close()

	req := oncekv.Request{Handler: "checkout", Key: "order-1", Payload: []byte("2 apples")}
	fmt.Println("Run:", outboxGuide(ctx, db, req, []byte("2 apples"), srv.URL))
	// Output:
	// receiver: 2 apples, Idempotency-Key order-1
	// Run: <nil>
}
