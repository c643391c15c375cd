package idemhttp_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/idemhttptest"
)

func TestNewValidatesOptions(t *testing.T) {
	db := openDB(t, idemhttptest.NewClock().Now, nil)
	_, err := idemhttp.New(db, nil)
	require.ErrorIs(t, err, idemhttp.ErrInvalidOptions)
	require.ErrorContains(t, err, "Scope")

	_, err = idemhttp.New(nil, &idemhttp.Options{Scope: idemhttptest.UserScope})
	require.ErrorIs(t, err, idemhttp.ErrInvalidOptions)
	require.ErrorContains(t, err, "db is nil")

	_, err = idemhttp.New(db, &idemhttp.Options{
		Scope:              idemhttptest.UserScope,
		MaxBodyBytes:       -1,
		MaxRecordBytes:     1<<30 + 1, // over 1 GiB, and an int on 32-bit platforms too
		Lease:              time.Second,
		Heartbeat:          2 * time.Second,
		Methods:            []string{"PO ST"},
		FingerprintHeaders: []string{"Content:Type"},
		ReplayHeaders:      []string{""},
	})
	require.ErrorIs(t, err, idemhttp.ErrInvalidOptions)
	for _, field := range []string{"MaxBodyBytes", "MaxRecordBytes", "Heartbeat", "Methods", "FingerprintHeaders", "ReplayHeaders"} {
		require.ErrorContains(t, err, field)
	}
	require.True(t, strings.HasPrefix(err.Error(), "oncekv: "), err.Error())
}

// leaseErr is an error carrying a lease end, as ErrInProgress will.
type leaseErr struct{ until time.Time }

func (e leaseErr) Error() string { return "held" }

func (e leaseErr) LeaseUntil() time.Time { return e.until }

func TestRetryAfterUsesTheLeaseEndWhenKnown(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	wrapped := errors.Join(oncekv.ErrInProgress, leaseErr{now.Add(2500 * time.Millisecond)})
	require.Equal(t, 2500*time.Millisecond, idemhttp.RetryAfter(wrapped, now, time.Minute))
	require.Equal(t, time.Minute, idemhttp.RetryAfter(oncekv.ErrInProgress, now, time.Minute))
	require.Equal(t, time.Minute, idemhttp.RetryAfter(leaseErr{}, now, time.Minute), "a zero lease end is unknown")
	for d, want := range map[time.Duration]int64{-time.Second: 1, 0: 1, time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, time.Minute: 60, math.MaxInt64: math.MaxInt64/int64(time.Second) + 1} {
		require.Equal(t, want, idemhttp.RetryAfterSeconds(d), "%v", d)
	}
}

func TestDedupLastsTheRetentionWindow(t *testing.T) {
	clk := idemhttptest.NewClock()
	db := openDB(t, clk.Now, &oncekv.Options{ExpireInterval: -1, Retention: 2 * time.Hour, WindowSpan: time.Hour})
	h := &idemhttptest.Counter{}
	srv := serve(t, db, nil, h)
	c := idemhttptest.Call{Key: "k", User: "alice"}
	idemhttptest.Send(t, srv, c)
	clk.Add(90 * time.Minute)
	_, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.True(t, idemhttptest.Send(t, srv, c).Replayed(), "within retention the response is replayed")
	clk.Add(3 * time.Hour)
	_, err = db.Expire(context.Background())
	require.NoError(t, err)
	rep := idemhttptest.Send(t, srv, c)
	require.False(t, rep.Replayed(), "after retention the key is new again")
	require.EqualValues(t, 2, h.Runs.Load())
}
