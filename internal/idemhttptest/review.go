package idemhttptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
)

// A user who lifts the body limit as far as it goes ("no limit") must still
// get the body to the handler: limit+1 must not overflow into a reader that
// reads nothing.
func testMaxBodyBytesAtItsMaximumKeepsTheBody(t *testing.T, e *env) {
	srv := e.serve(t, &idemhttp.Options{MaxBodyBytes: math.MaxInt64}, Echo)
	got := Send(t, srv, Call{Key: "k", User: "alice", Body: []byte(`{"amount":12}`)})
	require.Equal(t, http.StatusCreated, got.Status)
	require.Equal(t, `{"amount":12}`, string(got.Body))
}

// The Content-Length a client declares is not trusted for an allocation:
// a huge one with a tiny body must neither panic nor allocate it.
func testDeclaredContentLengthIsNotAllocated(t *testing.T, e *env) {
	mw, err := e.s.New(&idemhttp.Options{Scope: UserScope, MaxBodyBytes: math.MaxInt64})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("x"))
	req.ContentLength = 1 << 62
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("X-User", "alice")
	rec := httptest.NewRecorder()
	require.NotPanics(t, func() { mw.Wrap(Echo).ServeHTTP(rec, req) })
	require.Equal(t, http.StatusCreated, rec.Code)
	require.Equal(t, "x", rec.Body.String())
}

// A response that could not be stored was never given: the 500 that
// replaces it must not carry the handler's Location, ETag or Set-Cookie
// (a cookie for an order that does not exist, a Location to nowhere).
func testFailedCommitAnswerCarriesNoneOfTheHandlersHeaders(t *testing.T, e *env) {
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.fail(t, r, errors.New("disk says no"))
		w.Header().Set("Location", "/orders/1")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Set-Cookie", "order=1")
		w.Header().Set("X-Order", "1")
		w.WriteHeader(http.StatusCreated)
	}))
	rep := Send(t, srv, Call{Key: "k", User: "alice"})
	require.Equal(t, http.StatusInternalServerError, rep.Status)
	typ, _ := ProblemOf(t, rep)
	require.Equal(t, idemhttp.ProblemStoreFailed, typ)
	for _, name := range []string{"Location", "ETag", "Set-Cookie", "X-Order"} {
		require.Empty(t, rep.Header.Values(name), name)
	}
}

// Retry-After is what is left of the running request's lease, by the
// store's clock.
func testRetryAfterIsTheRemainingLease(t *testing.T, e *env) {
	b := newBlocker()
	defer b.free()
	clk := e.clk
	srv := e.serve(t, &idemhttp.Options{Lease: 90 * time.Second}, b)
	c := Call{Key: "k", User: "alice"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = TrySend(context.Background(), srv, c)
	}()
	<-b.started

	clk.Add(60 * time.Second)
	rep := Send(t, srv, c)
	require.Equal(t, http.StatusConflict, rep.Status)
	require.Equal(t, "30", rep.Header.Get("Retry-After"))

	b.free()
	<-done
}

// A handler that compresses its own response: the stored body is the
// compressed bytes, and a replay without Content-Encoding would hand the
// client bytes it cannot read as the answer.
func testReplayKeepsContentEncoding(t *testing.T, e *env) {
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write([]byte(`{"receipt":"r-1"}`))
		Check(t, zw.Close())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(buf.Bytes())
	}))
	c := Call{Key: "k", User: "alice"}
	first := Send(t, srv, c)
	require.Equal(t, http.StatusCreated, first.Status)
	require.Equal(t, `{"receipt":"r-1"}`, string(first.Body)) // the client decoded it
	again := Send(t, srv, c)
	require.True(t, again.Replayed())
	require.Equal(t, first.Body, again.Body)
}
