package idemhttp_test

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
