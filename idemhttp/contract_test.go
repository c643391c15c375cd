package idemhttp_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
)

// The first answer and every replay say until when the key is honoured,
// the same date each time: first seen plus the store's Retention. And the
// promise holds: a retry one second before that date is still replayed
// after an expiry run.
func TestKeyExpiresIsFirstSeenPlusRetentionAndHolds(t *testing.T) {
	clk := newClock()
	clk.Add(500 * time.Millisecond) // a fraction of a second, rounded down in the date
	first := clk.Now()
	db := openDB(t, clk, &oncekv.Options{ExpireInterval: -1, Retention: 2 * time.Hour, WindowSpan: time.Hour})
	h := &counter{}
	srv := serve(t, db, nil, h)
	c := call{key: "k", user: "alice"}

	want := first.Add(2 * time.Hour).Truncate(time.Second)
	rep := send(t, srv, c)
	require.Equal(t, http.StatusCreated, rep.status)
	require.False(t, rep.replayed())
	got, err := http.ParseTime(rep.header.Get(idemhttp.HeaderKeyExpires))
	require.NoError(t, err, "%s is an HTTP-date", idemhttp.HeaderKeyExpires)
	require.True(t, want.Equal(got), "first answer: %v, want %v", got, want)

	clk.Add(30 * time.Minute)
	again := send(t, srv, c)
	require.Equal(t, "true", again.header.Get(idemhttp.HeaderReplayed))
	require.Equal(t, rep.header.Get(idemhttp.HeaderKeyExpires), again.header.Get(idemhttp.HeaderKeyExpires),
		"a replay gives the same date as the first answer")

	clk.Add(want.Sub(clk.Now()) - time.Second)
	_, err = db.Expire(context.Background())
	require.NoError(t, err)
	require.True(t, send(t, srv, c).replayed(), "a retry before the date is replayed")
	require.EqualValues(t, 1, h.runs.Load())
}

// Answers that are not stored promise nothing: no expiry date on a 5xx,
// on a DoNotStore answer, or on a pass-through request without a key.
func TestKeyExpiresOnlyOnStoredAnswers(t *testing.T) {
	db := openDB(t, newClock(), nil)
	failing := serve(t, db, &idemhttp.Options{Handler: "failing"}, &counter{status: http.StatusBadGateway})
	rep := send(t, failing, call{key: "k", user: "alice"})
	require.Equal(t, http.StatusBadGateway, rep.status)
	require.Empty(t, rep.header.Values(idemhttp.HeaderKeyExpires))

	refusing := serve(t, db, &idemhttp.Options{Handler: "refusing"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		check(t, idemhttp.DoNotStore(r))
		w.WriteHeader(http.StatusBadRequest)
	}))
	rep = send(t, refusing, call{key: "k", user: "alice"})
	require.Equal(t, http.StatusBadRequest, rep.status)
	require.Empty(t, rep.header.Values(idemhttp.HeaderKeyExpires))

	plain := serve(t, db, nil, &counter{})
	rep = send(t, plain, call{user: "alice"})
	require.Equal(t, http.StatusCreated, rep.status)
	require.Empty(t, rep.header.Values(idemhttp.HeaderKeyExpires))
	require.Empty(t, rep.header.Values(idemhttp.HeaderReplayed))
}

// A response that streamed before its commit had its headers sent before
// the store knew the key's date: it carries none, and its replays do.
func TestKeyExpiresOnReplaysOfAStreamedAnswer(t *testing.T) {
	db := openDB(t, newClock(), nil)
	srv := serve(t, db, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("streamed"))
		check(t, http.NewResponseController(w).Flush())
	}))
	c := call{key: "k", user: "alice"}
	rep := send(t, srv, c)
	require.Equal(t, http.StatusCreated, rep.status)
	require.Empty(t, rep.header.Values(idemhttp.HeaderKeyExpires))
	again := send(t, srv, c)
	require.True(t, again.replayed())
	_, err := http.ParseTime(again.header.Get(idemhttp.HeaderKeyExpires))
	require.NoError(t, err)
}

// The header names the package exports are those its answers carry.
func TestHeaderConstantsAreWhatIsSent(t *testing.T) {
	b := newBlocker()
	defer b.free()
	srv := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{Lease: 42 * time.Second}, b)
	go func() { _, _ = trySend(context.Background(), srv, call{key: "busy", user: "alice"}) }()
	<-b.started
	rep := send(t, srv, call{key: "busy", user: "alice"})
	require.Equal(t, http.StatusConflict, rep.status)
	require.Equal(t, "42", rep.header.Get(idemhttp.HeaderRetryAfter))
	b.free()

	big := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{MaxRecordBytes: 4}, &counter{})
	c := call{key: "k", user: "alice"}
	send(t, big, c)
	rep = send(t, big, c)
	require.Equal(t, "true", rep.header.Get(idemhttp.HeaderReplayed))
	require.Equal(t, "true", rep.header.Get(idemhttp.HeaderReplayBodyOmitted))
}
