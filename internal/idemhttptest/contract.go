package idemhttptest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
)

// Answers that are not stored promise nothing: no expiry date on a 5xx,
// on a DoNotStore answer, or on a pass-through request without a key.
func testKeyExpiresOnlyOnStoredAnswers(t *testing.T, e *env) {
	failing := e.serve(t, &idemhttp.Options{Handler: "failing"}, &Counter{Status: http.StatusBadGateway})
	rep := Send(t, failing, Call{Key: "k", User: "alice"})
	require.Equal(t, http.StatusBadGateway, rep.Status)
	require.Empty(t, rep.Header.Values(idemhttp.HeaderKeyExpires))

	refusing := e.serve(t, &idemhttp.Options{Handler: "refusing"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Check(t, idemhttp.DoNotStore(r))
		w.WriteHeader(http.StatusBadRequest)
	}))
	rep = Send(t, refusing, Call{Key: "k", User: "alice"})
	require.Equal(t, http.StatusBadRequest, rep.Status)
	require.Empty(t, rep.Header.Values(idemhttp.HeaderKeyExpires))

	plain := e.serve(t, nil, &Counter{})
	rep = Send(t, plain, Call{User: "alice"})
	require.Equal(t, http.StatusCreated, rep.Status)
	require.Empty(t, rep.Header.Values(idemhttp.HeaderKeyExpires))
	require.Empty(t, rep.Header.Values(idemhttp.HeaderReplayed))
}

// A response that streamed before its commit had its headers sent before
// the store knew the key's date: it carries none, and its replays do.
func testKeyExpiresOnReplaysOfAStreamedAnswer(t *testing.T, e *env) {
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("streamed"))
		Check(t, http.NewResponseController(w).Flush())
	}))
	c := Call{Key: "k", User: "alice"}
	rep := Send(t, srv, c)
	require.Equal(t, http.StatusCreated, rep.Status)
	require.Empty(t, rep.Header.Values(idemhttp.HeaderKeyExpires))
	again := Send(t, srv, c)
	require.True(t, again.Replayed())
	_, err := http.ParseTime(again.Header.Get(idemhttp.HeaderKeyExpires))
	require.NoError(t, err)
}

// The header names the package exports are those its answers carry.
func testHeaderConstantsAreWhatIsSent(t *testing.T, e *env) {
	b := newBlocker()
	defer b.free()
	srv := e.serve(t, &idemhttp.Options{Lease: 42 * time.Second}, b)
	go func() { _, _ = TrySend(context.Background(), srv, Call{Key: "busy", User: "alice"}) }()
	<-b.started
	rep := Send(t, srv, Call{Key: "busy", User: "alice"})
	require.Equal(t, http.StatusConflict, rep.Status)
	require.Equal(t, "42", rep.Header.Get(idemhttp.HeaderRetryAfter))
	b.free()

	big := e.fresh(t).serve(t, &idemhttp.Options{MaxRecordBytes: 4}, &Counter{})
	c := Call{Key: "k", User: "alice"}
	Send(t, big, c)
	rep = Send(t, big, c)
	require.Equal(t, "true", rep.Header.Get(idemhttp.HeaderReplayed))
	require.Equal(t, "true", rep.Header.Get(idemhttp.HeaderReplayBodyOmitted))
}
