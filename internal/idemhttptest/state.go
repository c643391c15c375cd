package idemhttptest

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
)

// TestDoNotStoreLetsACorrectedRequestReuseTheKey: a handler that refuses
// a body before any effect answers 422 without storing it (DoNotStore):
// its staged writes are dropped, and the client's corrected request,
// under the same key and another body, runs the handler; that answer is
// stored and replayed as usual.
func testDoNotStoreLetsACorrectedRequestReuseTheKey(t *testing.T, e *env) {
	runs := 0
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		body, _ := io.ReadAll(r.Body)
		e.put(t, r, "notes", "n-"+string(body), "saved")
		if string(body) == "bad" {
			Check(t, idemhttp.DoNotStore(r))
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte("title must not be empty"))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("saved " + string(body)))
	}))
	first := Send(t, srv, Call{Key: "k", User: "alice", Body: []byte("bad")})
	require.Equal(t, http.StatusUnprocessableEntity, first.Status)
	require.Equal(t, "title must not be empty", string(first.Body))
	require.False(t, first.Replayed())
	require.Empty(t, e.keys(t, "notes"), "the refused request's staged writes are dropped")

	again := Send(t, srv, Call{Key: "k", User: "alice", Body: []byte("bad")})
	require.Equal(t, http.StatusUnprocessableEntity, again.Status)
	require.False(t, again.Replayed(), "nothing was stored: the handler ran again")

	fixed := Send(t, srv, Call{Key: "k", User: "alice", Body: []byte("good")})
	require.Equal(t, http.StatusCreated, fixed.Status, string(fixed.Body))
	require.Equal(t, "saved good", string(fixed.Body))
	rep := Send(t, srv, Call{Key: "k", User: "alice", Body: []byte("good")})
	require.True(t, rep.Replayed())
	require.Equal(t, 3, runs)
	require.Equal(t, []string{"n-good"}, e.keys(t, "notes"))
}

func testDoNotStoreErrors(t *testing.T, e *env) {
	var late *http.Request
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		late = r
		if r.Header.Get("Idempotency-Key") == "" {
			require.ErrorIs(t, idemhttp.DoNotStore(r), idemhttp.ErrNoClaim)
		}
	}))
	Send(t, srv, Call{User: "alice"})
	Send(t, srv, Call{Key: "k", User: "alice"})
	require.ErrorIs(t, idemhttp.DoNotStore(late), idemhttp.ErrStageClosed)
	require.ErrorIs(t, idemhttp.DoNotStore(nil), idemhttp.ErrNoClaim)
}
