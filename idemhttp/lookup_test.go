package idemhttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/idemhttptest"
)

// TestLookupFindsTheRecordByWhatTheClientSent: the support question "did
// alice's request with key k go through, and what did she get?" is
// answered from (scope, Idempotency-Key), decoded: status, replayed
// headers, body; a request still running shows its claim.
func TestLookupFindsTheRecordByWhatTheClientSent(t *testing.T) {
	db := openDB(t, idemhttptest.NewClock().Now, nil)
	release := make(chan struct{})
	mw, err := idemhttp.New(db, &idemhttp.Options{Scope: idemhttptest.UserScope})
	require.NoError(t, err)
	srv := idemhttptest.ServeRaw(t, mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "slow" {
			<-release
		}
		w.Header().Set("Location", "/orders/7")
		w.Header().Set("X-Not-Replayed", "x")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":7}`))
	})))
	idemhttptest.Send(t, srv, idemhttptest.Call{Key: "k", User: "alice"})

	s, err := mw.Lookup("alice", "k")
	require.NoError(t, err)
	require.Equal(t, oncekv.MarkDone, s.Mark.State)
	require.Equal(t, idemhttp.RecordKey("alice", "k"), s.Mark.Key)
	require.Equal(t, http.StatusCreated, s.Record.Status)
	require.Equal(t, "/orders/7", s.Record.Header.Get("Location"))
	require.Empty(t, s.Record.Header.Get("X-Not-Replayed"))
	require.Equal(t, `{"id":7}`, string(s.Record.Body))
	same, err := idemhttp.Lookup(db, "", "alice", "k")
	require.NoError(t, err)
	require.Equal(t, s.Record, same.Record)
	_, err = mw.Lookup("bob", "k")
	require.ErrorIs(t, err, oncekv.ErrNotFound, "another caller's key is another record")

	done := make(chan idemhttptest.Reply)
	go func() { done <- idemhttptest.Send(t, srv, idemhttptest.Call{Key: "slow", User: "alice"}) }()
	require.Eventually(t, func() bool {
		s, err := mw.Lookup("alice", "slow")
		return err == nil && s.Mark.State == oncekv.MarkInProgress && s.Record == nil
	}, 10*time.Second, time.Millisecond)
	close(release)
	require.Equal(t, http.StatusCreated, (<-done).Status)

	_, err = idemhttp.ParseRecord([]byte("not a record"))
	require.ErrorIs(t, err, idemhttp.ErrBadRecord)
}
