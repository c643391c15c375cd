package main_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// parkedStore leaves two keys parked: each claimed by a process that
// closed without completing (an orphan for the next Open), then taken
// over by a ClaimWith whose probe cannot tell what the first attempt did.
func parkedStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "parked.db")
	c := &fakeClock{now: t0}
	ctx := context.Background()
	db := openStore(t, path, c)
	for _, key := range []string{"order-7", "order-8"} {
		_, err := db.Claim(ctx, oncekv.Request{Handler: "charge", Key: key}, time.Hour)
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())
	c.now = t0.Add(10 * time.Minute)
	db = openStore(t, path, c)
	unknown := &oncekv.ClaimOptions{Probe: func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		return oncekv.OutcomeUnknown, nil, nil
	}}
	for _, key := range []string{"order-7", "order-8"} {
		_, err := db.ClaimWith(ctx, oncekv.Request{Handler: "charge", Key: key}, time.Minute, unknown)
		require.ErrorIs(t, err, oncekv.ErrParked)
	}
	require.NoError(t, db.Close())
	return path
}

// TestParkedAndResolve: the operator lists the parked keys with the
// attempt in doubt, the keys wait (every delivery refused), and resolve
// settles each: one as applied with the gateway's receipt, one as not
// applied, which the next delivery runs afresh.
func TestParkedAndResolve(t *testing.T) {
	path := parkedStore(t)
	r := cli(t, "parked", path)
	require.Equal(t, 0, r.code, r.stderr)
	rows := lines(r.stdout)
	require.Len(t, rows, 3)
	require.Contains(t, rows[0], "CLAIM KEY")
	require.Contains(t, rows[1], `"charge"`)
	require.Contains(t, rows[1], `"order-7"`)
	require.Contains(t, rows[1], "2024-05-01T10:10:00Z")

	r = cli(t, "parked", "-json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var p struct {
		State          string    `json:"state"`
		Token          uint64    `json:"token"`
		ClaimKey       string    `json:"claim_key"`
		AttemptStarted time.Time `json:"attempt_started"`
		ParkedAt       time.Time `json:"parked_at"`
		Takeovers      int       `json:"takeovers"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines(r.stdout)[0]), &p))
	require.Equal(t, "PARKED", p.State)
	require.Equal(t, uint64(1), p.Token, "the first attempt's token, the one the gateway may have seen")
	require.Equal(t, t0, p.AttemptStarted)
	require.Equal(t, t0.Add(10*time.Minute), p.ParkedAt)
	require.Equal(t, 1, p.Takeovers)
	require.Len(t, p.ClaimKey, 64)

	// The key waits for the operator.
	c := &fakeClock{now: t0.Add(time.Hour)}
	db := openStore(t, path, c)
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: "charge", Key: "order-7"}, nil)
	require.ErrorIs(t, err, oncekv.ErrParked)
	require.NoError(t, db.Close())

	for _, bad := range [][]string{
		{"resolve", path, "charge", "order-7"},
		{"resolve", path, "charge", "order-7", "-applied", "-not-applied"},
		{"resolve", path, "charge", "order-7", "-not-applied", "-response", "x"},
	} {
		r = cli(t, bad...)
		require.Equal(t, 2, r.code, "%v: %s", bad, r.stdout)
		require.Contains(t, r.stderr, "usage: oncekv resolve")
	}
	r = cli(t, "resolve", path, "charge", "order-7", "-applied", "-response", "rcpt-1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "charge/order-7: resolved as applied (the attempt with token 1); its duplicates get the 6-byte response\n", r.stdout)
	r = cli(t, "resolve", path, "charge", "order-8", "-not-applied")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "resolved as not applied")
	r = cli(t, "resolve", path, "charge", "order-7", "-applied")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "not parked")
	r = cli(t, "resolve", path, "charge", "order-9", "-applied")
	require.Equal(t, 1, r.code, "no mark: exit 1")

	r = cli(t, "parked", path)
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, strings.HasSuffix(r.stdout, "(no parked keys)\n"), r.stdout)

	db = openStore(t, path, c)
	defer func() { require.NoError(t, db.Close()) }()
	res, err := db.Apply(context.Background(), oncekv.Request{Handler: "charge", Key: "order-7"}, nil)
	require.NoError(t, err)
	require.Equal(t, "rcpt-1", string(res.Response))
	claim, err := db.ClaimWith(context.Background(), oncekv.Request{Handler: "charge", Key: "order-8"}, time.Minute, nil)
	require.NoError(t, err)
	require.False(t, claim.Done(), "not applied: run afresh")
	_, taken := claim.TakenOver()
	require.False(t, taken)
}
