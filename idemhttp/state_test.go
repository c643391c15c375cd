package idemhttp_test

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
func TestDoNotStoreLetsACorrectedRequestReuseTheKey(t *testing.T) {
	db := openDB(t, newClock(), nil)
	runs := 0
	srv := serve(t, db, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		body, _ := io.ReadAll(r.Body)
		stage(t, r, put("notes", "n-"+string(body), "saved"))
		if string(body) == "bad" {
			check(t, idemhttp.DoNotStore(r))
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte("title must not be empty"))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("saved " + string(body)))
	}))
	first := send(t, srv, call{key: "k", user: "alice", body: []byte("bad")})
	require.Equal(t, http.StatusUnprocessableEntity, first.status)
	require.Equal(t, "title must not be empty", string(first.body))
	require.False(t, first.replayed())
	require.Empty(t, keys(t, db, "notes"), "the refused request's staged writes are dropped")

	again := send(t, srv, call{key: "k", user: "alice", body: []byte("bad")})
	require.Equal(t, http.StatusUnprocessableEntity, again.status)
	require.False(t, again.replayed(), "nothing was stored: the handler ran again")

	fixed := send(t, srv, call{key: "k", user: "alice", body: []byte("good")})
	require.Equal(t, http.StatusCreated, fixed.status, string(fixed.body))
	require.Equal(t, "saved good", string(fixed.body))
	rep := send(t, srv, call{key: "k", user: "alice", body: []byte("good")})
	require.True(t, rep.replayed())
	require.Equal(t, 3, runs)
	require.Equal(t, []string{"n-good"}, keys(t, db, "notes"))
}

func TestDoNotStoreErrors(t *testing.T) {
	var late *http.Request
	srv := serve(t, openDB(t, newClock(), nil), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		late = r
		if r.Header.Get("Idempotency-Key") == "" {
			require.ErrorIs(t, idemhttp.DoNotStore(r), idemhttp.ErrNoClaim)
		}
	}))
	send(t, srv, call{user: "alice"})
	send(t, srv, call{key: "k", user: "alice"})
	require.ErrorIs(t, idemhttp.DoNotStore(late), idemhttp.ErrStageClosed)
	require.ErrorIs(t, idemhttp.DoNotStore(nil), idemhttp.ErrNoClaim)
}
