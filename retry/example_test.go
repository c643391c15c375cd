package retry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/oncekv/oncekv/retry"
)

// The delays of a policy: each attempt's ceiling doubles from Base up to
// Cap, and the delay is drawn uniformly below it (full jitter).
func ExampleRetrier_Backoff() {
	r, err := retry.New(&retry.Policy{
		Base: 100 * time.Millisecond,
		Cap:  time.Second,
		Rand: rand.NewPCG(1, 2), // seeded, so the output is stable
	})
	if err != nil {
		panic(err)
	}
	for attempt := 1; attempt <= 6; attempt++ {
		d := r.Backoff(attempt)
		fmt.Printf("after attempt %d: %v, below %v\n", attempt, d.Round(time.Millisecond), r.Ceiling(attempt))
	}
	// Output:
	// after attempt 1: 77ms, below 100ms
	// after attempt 2: 123ms, below 200ms
	// after attempt 3: 314ms, below 400ms
	// after attempt 4: 637ms, below 800ms
	// after attempt 5: 234ms, below 1s
	// after attempt 6: 41ms, below 1s
}

// A queue's nack: the decision says when the message is visible again (its
// At is persisted, so it survives a restart), or that it goes to the dead
// letters, or that it is released as it was.
func ExampleRetrier_Decide() {
	r, err := retry.New(&retry.Policy{Rand: rand.NewPCG(1, 2)})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	nack := func(attempt int, cause error) {
		d := r.Decide(ctx, attempt, cause, now)
		switch {
		case d.Retry():
			fmt.Printf("attempt %d: visible again at %s\n", attempt, d.At.Format("15:04:05.000"))
		case d.DeadLetter():
			fmt.Printf("attempt %d: dead letter (%s)\n", attempt, d.Reason)
		default:
			fmt.Printf("attempt %d: %s\n", attempt, d.Reason)
		}
	}
	nack(1, errors.New("upload: connection reset"))
	nack(2, retry.After(2*time.Minute, errors.New("upload: 503")))
	nack(3, retry.Permanent(errors.New("upload: 422 bad checksum")))
	nack(10, errors.New("upload: connection reset"))
	// Output:
	// attempt 1: visible again at 12:00:00.769
	// attempt 2: visible again at 12:02:00.000
	// attempt 3: dead letter (permanent)
	// attempt 10: dead letter (attempts exhausted)
}

// A server's Retry-After floors the next delay: the retry never comes
// sooner than the server asked, capped by Policy.MaxRetryAfter.
func ExampleAfter() {
	r, err := retry.New(&retry.Policy{Rand: rand.NewPCG(1, 2)})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	wait, err := retry.ParseRetryAfter("Mon, 30 Nov 2026 12:00:30 GMT", now)
	if err != nil {
		panic(err)
	}
	cause := retry.After(wait, errors.New("ingest: 503"))
	d := r.Decide(context.Background(), 1, cause, now)
	fmt.Println(wait, d.Delay, d.Reason)
	// Output:
	// 30s 30s retry
}

// A relay's workers share one budget: every first delivery is recorded,
// and Decide spends a retry from it. With the far side down, 100 messages
// earn 10 retries plus the floor's 10; the rest wait (ReasonBudget) instead
// of multiplying the load.
func ExampleBudget() {
	budget, err := retry.NewBudget(nil) // 10% over 10s, 1/s floor
	if err != nil {
		panic(err)
	}
	r, err := retry.New(&retry.Policy{Budget: budget, Rand: rand.NewPCG(1, 2)})
	if err != nil {
		panic(err)
	}
	outage := errors.New("ingest: connection refused")
	retried, waiting := 0, 0
	for range 100 {
		budget.Attempt() // a first delivery
		switch d := r.Decide(context.Background(), 1, outage, time.Now()); d.Reason {
		case retry.ReasonRetry:
			retried++
		case retry.ReasonBudget:
			waiting++
		}
	}
	st := budget.Stats()
	fmt.Println("retried:", retried, "waiting:", waiting)
	fmt.Println("deposits:", st.Deposits, "withdrawals:", st.Withdrawals, "refused:", st.Refused)
	// Output:
	// retried: 20 waiting: 80
	// deposits: 100 withdrawals: 20 refused: 80
}

// An HTTP sender: POST with the message's idempotency key (stable across
// every retry), classify the answer with HTTPStatus, and let Do wait. The
// server here answers 503 with Retry-After once, then 201.
func ExampleDo() {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		calls++
		fmt.Println("server: key", req.Header.Get("Idempotency-Key"))
		if calls == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	policy := &retry.Policy{
		Rand: rand.NewPCG(1, 2),
		// A real sender keeps the default Sleep; this one only prints.
		Sleep: func(_ context.Context, d time.Duration) error {
			fmt.Println("sender: waiting", d)
			return nil
		},
	}
	send := func(ctx context.Context, attempt int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader([]byte(`{"t":21.5}`)))
		if err != nil {
			return retry.Permanent(err)
		}
		req.Header.Set("Idempotency-Key", "reading-17")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err // network errors are transient
		}
		defer resp.Body.Close()
		return retry.HTTPStatus(resp.StatusCode, resp.Header, time.Now())
	}
	err := retry.Do(context.Background(), policy, send)
	fmt.Println("sent:", err == nil)
	// Output:
	// server: key reading-17
	// sender: waiting 2s
	// server: key reading-17
	// sent: true
}

// retryGuide is the code block of docs/retry.md, verbatim (the root's
// TestDocsCodeBlocks compares them); Example_guide runs it.
func retryGuide(ctx context.Context, attempt int, cause error, now time.Time, newRequest func(context.Context) (*http.Request, error)) error {
	r, err := retry.New(nil) // Base 1s, Cap 5m, MaxAttempts 10, MaxRetryAfter 1h
	if err != nil {
		return err
	}
	d := r.Decide(ctx, attempt, cause, now) // attempt: 1 for the first delivery
	switch {
	case d.Retry(): // visible again at d.At (persist it)
		fmt.Println("retry after", attempt)
	case d.DeadLetter(): // d.Reason: permanent, or attempts exhausted
		fmt.Println("dead letter:", d.Reason)
	default: // ReasonBudget: keep it and ask again after d.Delay; ReasonCanceled: the caller's ctx ended, release it
		fmt.Println("hold:", d.Reason)
	}

	return retry.Do(ctx, nil, func(ctx context.Context, attempt int) error {
		// A new request each time (a body is read once), the same Idempotency-Key.
		req, err := newRequest(ctx)
		if err != nil {
			return retry.Permanent(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err // network errors are transient
		}
		defer resp.Body.Close()
		return retry.HTTPStatus(resp.StatusCode, resp.Header, time.Now())
	})
}

// Example_guide runs docs/retry.md's code for three failed attempts (a
// transient error, a permanent one, the last one allowed), each followed
// by a POST that the server accepts at once.
func Example_guide() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Println("server: key", req.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	newRequest := func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"t":21.5}`))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Idempotency-Key", "reading-17")
		return req, nil
	}
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, failed := range []struct {
		attempt int
		cause   error
	}{
		{1, errors.New("connection reset")},
		{2, retry.Permanent(errors.New("422 bad checksum"))},
		{10, errors.New("connection reset")},
	} {
		if err := retryGuide(ctx, failed.attempt, failed.cause, now, newRequest); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// retry after 1
	// server: key reading-17
	// dead letter: permanent
	// server: key reading-17
	// dead letter: attempts exhausted
	// server: key reading-17
}
