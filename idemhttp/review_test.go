package idemhttp_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
)

// echo answers 201 with the request body it was given.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
})

// A user who lifts the body limit as far as it goes ("no limit") must still
// get the body to the handler: limit+1 must not overflow into a reader that
// reads nothing.
func TestMaxBodyBytesAtItsMaximumKeepsTheBody(t *testing.T) {
	srv := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{MaxBodyBytes: math.MaxInt64}, echo)
	got := send(t, srv, call{key: "k", user: "alice", body: []byte(`{"amount":12}`)})
	require.Equal(t, http.StatusCreated, got.status)
	require.Equal(t, `{"amount":12}`, string(got.body))
}

// The Content-Length a client declares is not trusted for an allocation:
// a huge one with a tiny body must neither panic nor allocate it.
func TestDeclaredContentLengthIsNotAllocated(t *testing.T) {
	mw, err := idemhttp.New(openDB(t, newClock(), nil), &idemhttp.Options{Scope: userScope, MaxBodyBytes: math.MaxInt64})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("x"))
	req.ContentLength = 1 << 62
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("X-User", "alice")
	rec := httptest.NewRecorder()
	require.NotPanics(t, func() { mw.Wrap(echo).ServeHTTP(rec, req) })
	require.Equal(t, http.StatusCreated, rec.Code)
	require.Equal(t, "x", rec.Body.String())
}

// A response that could not be stored was never given: the 500 that
// replaces it must not carry the handler's Location, ETag or Set-Cookie
// (a cookie for an order that does not exist, a Location to nowhere).
func TestFailedCommitAnswerCarriesNoneOfTheHandlersHeaders(t *testing.T) {
	db := openDB(t, newClock(), nil)
	srv := serve(t, db, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stage(t, r, func(*oncekv.Tx) error { return errors.New("disk says no") })
		w.Header().Set("Location", "/orders/1")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Set-Cookie", "order=1")
		w.Header().Set("X-Order", "1")
		w.WriteHeader(http.StatusCreated)
	}))
	rep := send(t, srv, call{key: "k", user: "alice"})
	require.Equal(t, http.StatusInternalServerError, rep.status)
	typ, _ := problemOf(t, rep)
	require.Equal(t, idemhttp.ProblemStoreFailed, typ)
	for _, name := range []string{"Location", "ETag", "Set-Cookie", "X-Order"} {
		require.Empty(t, rep.header.Values(name), name)
	}
}

// Retry-After is what is left of the running request's lease, by the
// store's clock.
func TestRetryAfterIsTheRemainingLease(t *testing.T) {
	b := newBlocker()
	defer b.free()
	clk := newClock()
	srv := serve(t, openDB(t, clk, nil), &idemhttp.Options{Lease: 90 * time.Second}, b)
	c := call{key: "k", user: "alice"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = trySend(context.Background(), srv, c)
	}()
	<-b.started

	clk.Add(60 * time.Second)
	rep := send(t, srv, c)
	require.Equal(t, http.StatusConflict, rep.status)
	require.Equal(t, "30", rep.header.Get("Retry-After"))

	b.free()
	<-done
}

// A handler that compresses its own response: the stored body is the
// compressed bytes, and a replay without Content-Encoding would hand the
// client bytes it cannot read as the answer.
func TestReplayKeepsContentEncoding(t *testing.T) {
	srv := serve(t, openDB(t, newClock(), nil), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write([]byte(`{"receipt":"r-1"}`))
		check(t, zw.Close())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(buf.Bytes())
	}))
	c := call{key: "k", user: "alice"}
	first := send(t, srv, c)
	require.Equal(t, http.StatusCreated, first.status)
	require.Equal(t, `{"receipt":"r-1"}`, string(first.body)) // the client decoded it
	again := send(t, srv, c)
	require.True(t, again.replayed())
	require.Equal(t, first.body, again.body)
}

// A Middleware not made by New, or a nil handler, is refused when the
// server is wired up, not by letting requests through unprotected (a zero
// Middleware used to serve every request without a key check) or by a
// panic on every request (Wrap(nil) used to).
func TestWrapRefusesAMiddlewareNotMadeByNewAndANilHandler(t *testing.T) {
	var zero idemhttp.Middleware
	require.PanicsWithValue(t, "idemhttp: Wrap on a Middleware not made by New", func() { zero.Wrap(echo) })
	var nilMW *idemhttp.Middleware
	require.Panics(t, func() { nilMW.Wrap(echo) })

	mw, err := idemhttp.New(openDB(t, newClock(), nil), &idemhttp.Options{Scope: userScope})
	require.NoError(t, err)
	require.PanicsWithValue(t, "idemhttp: Wrap of a nil handler", func() { mw.Wrap(nil) })
	require.NotNil(t, mw.Wrap(echo))
}
