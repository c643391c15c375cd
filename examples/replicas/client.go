package replicas

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Client sends payments to the replicas round-robin, retrying a payment
// under the same Idempotency-Key on the next replica after a timeout, a
// dropped connection, 409 or 5xx, until one answers 2xx.
type Client struct {
	// Replicas returns the replicas' base URLs as of now (they move when
	// a replica restarts).
	Replicas func() []string
	HTTP     *http.Client
	// Timeout bounds one attempt.
	Timeout time.Duration
	// MaxWait caps the Retry-After of a 409.
	MaxWait time.Duration
	next    atomic.Uint64
	stats   Stats
}

// Stats counts a client's attempts by outcome.
type Stats struct {
	Attempts, OK, Replayed, InProgress, ServerErrors, TransportErrors, Dropped atomic.Int64
}

// Answer is a 2xx answer a client got.
type Answer struct {
	Status   int
	Location string
	Body     []byte
	Replayed bool
}

// Stats returns the client's counters.
func (c *Client) Stats() *Stats { return &c.stats }

// Pay makes p under key until a 2xx answer, or ctx ends. drop, when not
// nil, is asked after every 2xx answer whether to treat it as lost (the
// answer was made and sent, the client never read it): Pay then retries.
// It returns every 2xx answer it got, the kept one last.
func (c *Client) Pay(ctx context.Context, key string, p Payment, drop func() bool) ([]Answer, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var got []Answer
	for {
		if err := ctx.Err(); err != nil {
			return got, err
		}
		urls := c.Replicas()
		url := urls[c.next.Add(1)%uint64(len(urls))]
		c.stats.Attempts.Add(1)
		a, wait, err := c.attempt(ctx, url, key, p.Caller, body)
		var refused *StatusError
		switch {
		case errors.As(err, &refused):
			return got, err // a 4xx: retrying cannot help
		case err != nil:
			c.stats.TransportErrors.Add(1)
		case a != nil:
			got = append(got, *a)
			if drop != nil && drop() {
				c.stats.Dropped.Add(1)
				continue
			}
			c.stats.OK.Add(1)
			if a.Replayed {
				c.stats.Replayed.Add(1)
			}
			return got, nil
		}
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
	}
}

// attempt is one try on one replica: a 2xx answer, or how long to wait
// before the next try, or a transport error.
func (c *Client) attempt(ctx context.Context, url, key, caller string, body []byte) (*Answer, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/payments", bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Caller", caller)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, err
	}
	switch {
	case resp.StatusCode/100 == 2:
		return &Answer{Status: resp.StatusCode, Location: resp.Header.Get("Location"), Body: b,
			Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, 0, nil
	case resp.StatusCode == http.StatusConflict:
		c.stats.InProgress.Add(1)
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return nil, min(time.Duration(secs)*time.Second, c.MaxWait), nil
	case resp.StatusCode >= 500:
		c.stats.ServerErrors.Add(1)
		return nil, 10 * time.Millisecond, nil
	}
	return nil, 0, &StatusError{Status: resp.StatusCode, Body: string(b)}
}

// StatusError is an answer no retry can change (a 4xx but 409).
type StatusError struct {
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return "replicas: status " + strconv.Itoa(e.Status) + ": " + e.Body
}
