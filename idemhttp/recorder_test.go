package idemhttp_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReplayedHeaderWithANewlineReplaysWhatWasSent: a handler that builds
// a replayed header from user input (a Location with a newline in it)
// gets its first answer out, net/http turning the newline into a space;
// the record must hold what was sent, so every retry gets that answer
// back instead of a 500 for a request that was applied.
func TestReplayedHeaderWithANewlineReplaysWhatWasSent(t *testing.T) {
	runs := 0
	srv := serve(t, openDB(t, newClock(), nil), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Location", "/notes/a\nb\r\nX-Evil: 1 ")
		w.Header().Add("ETag", "\"v1\"\n")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("made"))
	}))
	first := send(t, srv, call{key: "k", user: "alice"})
	require.Equal(t, http.StatusCreated, first.status)
	require.Equal(t, "/notes/a b  X-Evil: 1", first.header.Get("Location"))
	require.Empty(t, first.header.Get("X-Evil"))
	for range 2 {
		rep := send(t, srv, call{key: "k", user: "alice"})
		require.Equal(t, http.StatusCreated, rep.status, string(rep.body))
		require.True(t, rep.replayed())
		require.Equal(t, first.header.Values("Location"), rep.header.Values("Location"))
		require.Equal(t, first.header.Values("Etag"), rep.header.Values("Etag"))
		require.Equal(t, []byte("made"), rep.body)
	}
	require.Equal(t, 1, runs)
}
