package relay_test

import (
	"context"
	"fmt"
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

// Example is the README's "Outbox and retries": an order and its outbox
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

// ExampleHTTPSender is the package doc's snippet: a queue delivered by
// HTTP POST until ctx is done.
func ExampleHTTPSender() {
	dir, _ := os.MkdirTemp("", "relay-example")
	defer os.RemoveAll(dir)
	db, _ := oncekv.Open(filepath.Join(dir, "app.db"), nil)
	defer db.Close()
	q, _ := queue.Open(db, "outbox", nil)
	defer q.Close()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Idempotency-Key")
	}))
	defer srv.Close()
	client, url := srv.Client(), srv.URL
	_, _ = q.Enqueue(context.Background(), queue.Message{Key: "evt-1", Body: []byte("hello")})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { fmt.Println("delivered:", <-got); cancel() }()

	send, err := relay.HTTPSender(client, http.MethodPost, url, nil)
	if err != nil {
		panic(err)
	}
	r, err := relay.New(q, send, nil)
	if err != nil {
		panic(err)
	}
	err = r.Run(ctx) // until ctx is done
	fmt.Println("Run:", err)
	// Output:
	// delivered: evt-1
	// Run: <nil>
}
