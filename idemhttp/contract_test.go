package idemhttp_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/idemhttptest"
)

// The first answer and every replay say until when the key is honoured,
// the same date each time: first seen plus the store's Retention. And the
// promise holds: a retry one second before that date is still replayed
// after an expiry run.
func TestKeyExpiresIsFirstSeenPlusRetentionAndHolds(t *testing.T) {
	clk := idemhttptest.NewClock()
	clk.Add(500 * time.Millisecond) // a fraction of a second, rounded down in the date
	first := clk.Now()
	db := openDB(t, clk.Now, &oncekv.Options{ExpireInterval: -1, Retention: 2 * time.Hour, WindowSpan: time.Hour})
	h := &idemhttptest.Counter{}
	srv := serve(t, db, nil, h)
	c := idemhttptest.Call{Key: "k", User: "alice"}

	want := first.Add(2 * time.Hour).Truncate(time.Second)
	rep := idemhttptest.Send(t, srv, c)
	require.Equal(t, http.StatusCreated, rep.Status)
	require.False(t, rep.Replayed())
	got, err := http.ParseTime(rep.Header.Get(idemhttp.HeaderKeyExpires))
	require.NoError(t, err, "%s is an HTTP-date", idemhttp.HeaderKeyExpires)
	require.True(t, want.Equal(got), "first answer: %v, want %v", got, want)

	clk.Add(30 * time.Minute)
	again := idemhttptest.Send(t, srv, c)
	require.Equal(t, "true", again.Header.Get(idemhttp.HeaderReplayed))
	require.Equal(t, rep.Header.Get(idemhttp.HeaderKeyExpires), again.Header.Get(idemhttp.HeaderKeyExpires),
		"a replay gives the same date as the first answer")

	clk.Add(want.Sub(clk.Now()) - time.Second)
	_, err = db.Expire(context.Background())
	require.NoError(t, err)
	require.True(t, idemhttptest.Send(t, srv, c).Replayed(), "a retry before the date is replayed")
	require.EqualValues(t, 1, h.Runs.Load())
}

// A retry after Retention that meets the key's tombstone gets 410 with
// its own problem type: the request was applied, its response is gone, and
// the handler does not run again.
func TestARetryMeetingATombstoneIsGone(t *testing.T) {
	clk := idemhttptest.NewClock()
	db := openDB(t, clk.Now, &oncekv.Options{ExpireInterval: -1, Retention: 2 * time.Hour, WindowSpan: time.Hour,
		TombstoneRetention: 24 * time.Hour})
	h := &idemhttptest.Counter{}
	srv := serve(t, db, nil, h)
	c := idemhttptest.Call{Key: "k", User: "alice"}
	require.Equal(t, http.StatusCreated, idemhttptest.Send(t, srv, c).Status)
	clk.Add(4 * time.Hour)
	st, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Tombstones)

	rep := idemhttptest.Send(t, srv, c)
	require.Equal(t, http.StatusGone, rep.Status, "%s", rep.Body)
	require.Contains(t, string(rep.Body), idemhttp.ProblemResponseExpired)
	require.Equal(t, "true", rep.Header.Get(idemhttp.HeaderReplayed))
	require.EqualValues(t, 1, h.Runs.Load())
}
