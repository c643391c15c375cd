package idemhttptest

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
func testReplayedHeaderWithANewlineReplaysWhatWasSent(t *testing.T, e *env) {
	runs := 0
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Location", "/notes/a\nb\r\nX-Evil: 1 ")
		w.Header().Add("ETag", "\"v1\"\n")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("made"))
	}))
	first := Send(t, srv, Call{Key: "k", User: "alice"})
	require.Equal(t, http.StatusCreated, first.Status)
	require.Equal(t, "/notes/a b  X-Evil: 1", first.Header.Get("Location"))
	require.Empty(t, first.Header.Get("X-Evil"))
	for range 2 {
		rep := Send(t, srv, Call{Key: "k", User: "alice"})
		require.Equal(t, http.StatusCreated, rep.Status, string(rep.Body))
		require.True(t, rep.Replayed())
		require.Equal(t, first.Header.Values("Location"), rep.Header.Values("Location"))
		require.Equal(t, first.Header.Values("Etag"), rep.Header.Values("Etag"))
		require.Equal(t, []byte("made"), rep.Body)
	}
	require.Equal(t, 1, runs)
}
