package idemhttptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Clock is an injected clock for a store; Reads counts how often the store
// read it, so a test can wait for a write transaction to begin after a
// step.
type Clock struct {
	nanos atomic.Int64
	reads atomic.Int64
}

// NewClock returns a clock at noon, 1 January 2026.
func NewClock() *Clock {
	c := &Clock{}
	c.nanos.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.reads.Add(1)
	return time.Unix(0, c.nanos.Load())
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) { c.nanos.Add(int64(d)) }

// Reads is how many times Now was called.
func (c *Clock) Reads() int64 { return c.reads.Load() }

// UserScope is the tests' authentication: the X-User header names the
// caller, and its absence is an unauthenticated request.
func UserScope(r *http.Request) (string, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return u, nil
	}
	return "", errors.New("no user")
}

// Call is one request of a test: POST /pay unless told.
type Call struct {
	Method, Path, Key, User string
	Body                    []byte
	Header                  http.Header // extra request headers
}

// Reply is what the client saw.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// Replayed reports whether the answer was a replay.
func (r Reply) Replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// Send makes c against srv with the real client; it fails the test on a
// transport error.
func Send(t testing.TB, srv *httptest.Server, c Call) Reply {
	t.Helper()
	rep, err := TrySend(context.Background(), srv, c)
	require.NoError(t, err)
	return rep
}

// TrySend is Send returning the transport error, for requests that are
// meant to break.
func TrySend(ctx context.Context, srv *httptest.Server, c Call) (Reply, error) {
	return Do(ctx, srv.Client(), srv.URL, c)
}

// Do makes c with client against the server at url.
func Do(ctx context.Context, client *http.Client, url string, c Call) (Reply, error) {
	if c.Method == "" {
		c.Method = http.MethodPost
	}
	if c.Path == "" {
		c.Path = "/pay"
	}
	req, err := http.NewRequestWithContext(ctx, c.Method, url+c.Path, bytes.NewReader(c.Body))
	if err != nil {
		return Reply{}, err
	}
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	if c.Key != "" {
		req.Header.Set("Idempotency-Key", c.Key)
	}
	if c.User != "" {
		req.Header.Set("X-User", c.User)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: body}, err
}

// ProblemOf decodes an RFC 9457 answer and checks its media type.
func ProblemOf(t testing.TB, r Reply) (typ string, status int) {
	t.Helper()
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "body: %s", r.Body)
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &p), "body: %s", r.Body)
	require.Equal(t, r.Status, p.Status)
	require.NotEmpty(t, p.Title)
	return p.Type, p.Status
}

// Counter is a handler that counts its runs and answers Status (201 when
// zero) with a body naming the run and the caller.
type Counter struct {
	Runs   atomic.Int64
	Status int
}

func (c *Counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.Runs.Add(1)
	w.Header().Set("Content-Type", "text/plain")
	status := c.Status
	if status == 0 {
		status = http.StatusCreated
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "run "+itoa(n)+" for "+r.Header.Get("X-User"))
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Check reports err from a handler's goroutine, where require's FailNow
// must not be called.
func Check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
	}
}

// QuietLog drops the server's log of the panics a test provokes.
func QuietLog() *log.Logger { return log.New(io.Discard, "", 0) }

// ServeRaw starts a real server with h as it is.
func ServeRaw(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// Echo answers 201 with the request body it was given.
var Echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
})
