package idemhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
)

// clock is an injected clock; reads counts how often the store read it,
// so a test can wait for a write transaction to begin after a step.
type clock struct {
	nanos atomic.Int64
	reads atomic.Int64
}

func newClock() *clock {
	c := &clock{}
	c.nanos.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time {
	c.reads.Add(1)
	return time.Unix(0, c.nanos.Load())
}

func (c *clock) Add(d time.Duration) { c.nanos.Add(int64(d)) }

// openDB opens a durable store in t.TempDir() on clk.
func openDB(t testing.TB, clk *clock, opts *oncekv.Options) *oncekv.DB {
	t.Helper()
	o := oncekv.Options{ExpireInterval: -1, Now: clk.Now}
	if opts != nil {
		o = *opts
		o.Now = clk.Now
	}
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "http.db"), &o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// userScope is the tests' authentication: the X-User header names the
// caller, and its absence is an unauthenticated request.
func userScope(r *http.Request) (string, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return u, nil
	}
	return "", errors.New("no user")
}

// serve starts a real server with h behind a middleware on db.
func serve(t testing.TB, db *oncekv.DB, opts *idemhttp.Options, h http.Handler) *httptest.Server {
	t.Helper()
	o := idemhttp.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Scope == nil {
		o.Scope = userScope
	}
	mw, err := idemhttp.New(db, &o)
	require.NoError(t, err)
	srv := httptest.NewServer(mw.Wrap(h))
	t.Cleanup(srv.Close)
	return srv
}

// call is one request of a test.
type call struct {
	method, path, key, user string
	body                    []byte
	header                  http.Header // extra request headers
}

// reply is what the client saw.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// send makes c against srv with the real client; it fails the test on a
// transport error.
func send(t testing.TB, srv *httptest.Server, c call) reply {
	t.Helper()
	rep, err := trySend(context.Background(), srv, c)
	require.NoError(t, err)
	return rep
}

// trySend is send returning the transport error, for requests that are
// meant to break.
func trySend(ctx context.Context, srv *httptest.Server, c call) (reply, error) {
	if c.method == "" {
		c.method = http.MethodPost
	}
	if c.path == "" {
		c.path = "/pay"
	}
	req, err := http.NewRequestWithContext(ctx, c.method, srv.URL+c.path, bytes.NewReader(c.body))
	if err != nil {
		return reply{}, err
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	if c.key != "" {
		req.Header.Set("Idempotency-Key", c.key)
	}
	if c.user != "" {
		req.Header.Set("X-User", c.user)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: body}, err
}

// problemOf decodes an RFC 9457 answer and checks its media type.
func problemOf(t testing.TB, r reply) (typ string, status int) {
	t.Helper()
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), "body: %s", r.body)
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal(r.body, &p), "body: %s", r.body)
	require.Equal(t, r.status, p.Status)
	require.NotEmpty(t, p.Title)
	return p.Type, p.Status
}

// counter is a handler that counts its runs and answers status with a
// body naming the run.
type counter struct {
	runs   atomic.Int64
	status int
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	w.Header().Set("Content-Type", "text/plain")
	status := c.status
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

// check reports err from a handler's goroutine, where require's FailNow
// must not be called.
func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
	}
}

// stage stages fn from a handler, reporting an error.
func stage(t testing.TB, r *http.Request, fn func(*oncekv.Tx) error) {
	t.Helper()
	check(t, idemhttp.Stage(r, fn))
}

// put is a staged write of key=value into bucket.
func put(bucket, key, value string) func(*oncekv.Tx) error {
	return func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), []byte(value))
	}
}

// keys lists the keys of bucket.
func keys(t testing.TB, db *oncekv.DB, bucket string) []string {
	t.Helper()
	var out []string
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	}))
	return out
}

// quietLog drops the server's log of the panics a test provokes.
func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }

// serveRaw starts a real server with h as it is.
func serveRaw(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
