package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// TestParkedAndResolve: two keys parked by a probe that could not tell
// are listed by `oncekv-pg parked` with the attempt in doubt; `resolve
// -applied` makes one a duplicate with the operator's response, `resolve
// -not-applied` lets the other run afresh; the list is then empty, and a
// resolve without its verdict is a usage error that changes nothing.
func TestParkedAndResolve(t *testing.T) {
	dsn := os.Getenv("ONCEKV_PG_DSN")
	if dsn == "" {
		t.Skip("ONCEKV_PG_DSN is not set: no PostgreSQL (start one with .ci/postgres.sh)")
	}
	ctx := context.Background()
	pool, schema := testSchema(t, dsn, "parked")
	s, err := postgres.Open(ctx, pool, postgres.Options{Schema: schema, ExpireInterval: -1})
	require.NoError(t, err)
	defer s.Close()
	unknown := &oncekv.ClaimOptions{Probe: func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		return oncekv.OutcomeUnknown, nil, nil
	}}
	tokens := map[string]uint64{}
	for _, key := range []string{"order-7", "order-8"} {
		r := oncekv.Request{Handler: "charge", Key: key}
		c, err := s.Claim(ctx, r, 50*time.Millisecond)
		require.NoError(t, err)
		tokens[key] = c.Token()
		time.Sleep(60 * time.Millisecond) // the database's clock: the lease runs out
		_, err = s.ClaimWith(ctx, r, time.Minute, unknown)
		require.ErrorIs(t, err, oncekv.ErrParked)
	}
	bin := build(t, t.TempDir(), ".", "oncekv-pg")
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	out, stderr, err := run("parked", "-dsn", dsn, "-schema", schema)
	require.NoError(t, err, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `^PARKED AT\s+TOKEN\s+ATTEMPT STARTED\s+TAKEOVERS\s+HANDLER\s+KEY\s+CLAIM KEY$`, lines[0])
	for i, key := range []string{"order-7", "order-8"} {
		f := strings.Fields(lines[i+1])
		require.Len(t, f, 7, lines[i+1])
		require.Equal(t, fmt.Sprint(tokens[key]), f[1])
		require.Equal(t, "1", f[3])
		require.Equal(t, `"charge"`, f[4])
		require.Equal(t, `"`+key+`"`, f[5])
		require.Len(t, f[6], 64, "the claim key")
	}

	_, _, err = run("resolve", "-dsn", dsn, "-schema", schema, "charge", "order-7")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode(), "no verdict: a usage error")
	out, stderr, err = run("resolve", "-dsn", dsn, "-schema", schema, "-applied", "-response", "rcpt-1", "charge", "order-7")
	require.NoError(t, err, stderr)
	require.Equal(t, "charge/order-7: resolved as applied; its duplicates get the 6-byte response\n", out)
	out, stderr, err = run("resolve", "-dsn", dsn, "-schema", schema, "-not-applied", "charge", "order-8")
	require.NoError(t, err, stderr)
	require.Equal(t, "charge/order-8: resolved as not applied; the next delivery runs it afresh\n", out)
	_, stderr, err = run("resolve", "-dsn", dsn, "-schema", schema, "-not-applied", "charge", "order-7")
	require.Error(t, err)
	require.Contains(t, stderr, "not parked: it is DONE")
	_, stderr, err = run("resolve", "-dsn", dsn, "-schema", schema, "-not-applied", "charge", "order-8")
	require.Error(t, err)
	require.Contains(t, stderr, "no mark for the key")
	out, _, err = run("parked", "-dsn", dsn, "-schema", schema)
	require.NoError(t, err)
	require.Contains(t, out, "(no parked keys)")

	res, err := s.Apply(ctx, oncekv.Request{Handler: "charge", Key: "order-7"}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "rcpt-1", string(res.Response))
	res, err = s.Apply(ctx, oncekv.Request{Handler: "charge", Key: "order-8"}, func(context.Context, pgx.Tx) ([]byte, error) { return []byte("ran"), nil })
	require.NoError(t, err)
	require.False(t, res.Duplicate)
}
