package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/dumpfile"
	"github.com/oncekv/oncekv/postgres"
)

// build builds the command pkg into dir and returns its path.
func build(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// testSchema returns a pool on dsn and the name of a schema for the test
// (prefix and this process's id), dropped when it ends.
func testSchema(t *testing.T, dsn, prefix string) (*pgxpool.Pool, string) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := fmt.Sprintf("%s_%d", prefix, os.Getpid())
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	return pool, schema
}

// TestLoadOfARealDump moves an embedded store into PostgreSQL the way an
// operator would: `oncekv dump` of a bbolt file (the real command, built
// from this repository), then `oncekv-pg load` of that dump. Every key the
// file had applied stays a duplicate in PostgreSQL with its response
// (nil and empty apart), its recorded failure, its fingerprint and its
// first-seen time; a claim in progress and a mark expired by
// PostgreSQL's retention are not loaded, so those keys apply afresh; the
// token counters carry over, so no token is handed out twice. A second
// load into the same schema is refused.
func TestLoadOfARealDump(t *testing.T) {
	dsn := os.Getenv("ONCEKV_PG_DSN")
	if dsn == "" {
		t.Skip("ONCEKV_PG_DSN is not set: no PostgreSQL to load into (start one with .ci/postgres.sh)")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "orders.db")
	now := time.Now().Add(-time.Hour)
	clock := now.Add(-30 * 24 * time.Hour)
	db, err := oncekv.Open(path, &oncekv.Options{Now: func() time.Time { return clock }, Retention: 40 * 24 * time.Hour,
		ExpireInterval: -1, MaxClockJump: -1})
	require.NoError(t, err)
	apply := func(key string, resp []byte, eff error) {
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: "orders", Key: key, Payload: []byte("p-" + key)},
			func(*oncekv.Tx) ([]byte, error) { return resp, eff })
		if eff == nil {
			require.NoError(t, err)
		}
	}
	apply("old", []byte("thirty days ago"), nil)
	clock = now
	apply("done", []byte("receipt 1"), nil)
	apply("nil", nil, nil)
	apply("empty", []byte{}, nil)
	apply("failed", nil, oncekv.Permanent(errors.New("card declined")))
	_, err = db.Apply(context.Background(), oncekv.Request{Handler: "orders", Key: "fp", Fingerprint: []byte("v1:42")},
		func(*oncekv.Tx) ([]byte, error) { return []byte("by fingerprint"), nil })
	require.NoError(t, err)
	c, err := db.Claim(context.Background(), oncekv.Request{Handler: "orders", Key: "claimed"}, time.Minute)
	require.NoError(t, err)
	_, err = c.Complete(context.Background(), []byte("completed"), nil)
	require.NoError(t, err)
	held, err := db.Claim(context.Background(), oncekv.Request{Handler: "orders", Key: "held"}, time.Hour)
	require.NoError(t, err)
	for range 3 {
		_, err = db.NextFence("acct-1")
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())

	dump := filepath.Join(dir, "orders.jsonl")
	var out bytes.Buffer
	cmd := exec.Command(build(t, dir, "github.com/oncekv/oncekv/cmd/oncekv", "oncekv"), "dump", path)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	require.NoError(t, cmd.Run())
	counters := bytes.Count(out.Bytes(), []byte(`"type":"counter"`))
	if counters == 0 {
		// A dump of a build before the token counters were dumped: add
		// them as the later format writes them (the claims' counter, and
		// acct-1's NextFence), to check what load does with them.
		t.Log("this build's dump has no counter lines: adding them as the format writes them")
		w := dumpfile.NewWriter(&out)
		require.NoError(t, w.Write(&dumpfile.Line{Type: dumpfile.TypeCounter, Last: held.Token()}))
		require.NoError(t, w.Write(&dumpfile.Line{Type: dumpfile.TypeCounter, Resource: "acct-1", Last: 3}))
		require.NoError(t, w.Flush())
		counters = 2
	}
	require.NoError(t, os.WriteFile(dump, out.Bytes(), 0o600))

	pool, schema := testSchema(t, dsn, "load")
	load := build(t, dir, ".", "oncekv-pg")
	var stdout, stderr bytes.Buffer
	cmd = exec.Command(load, "load", "-dsn", dsn, "-schema", schema)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(out.Bytes()), &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s", stderr.String())
	t.Logf("oncekv-pg load: %s%s", stdout.String(), stderr.String())
	require.Regexp(t, regexp.MustCompile(fmt.Sprintf(`^loaded 6 marks of 7 \(1 expired skipped\), raised %d token counters\n$`, counters)), stdout.String())
	require.Contains(t, stderr.String(), "1 claims in progress not loaded")

	s, err := postgres.Open(context.Background(), pool, postgres.Options{Schema: schema, ExpireInterval: -1})
	require.NoError(t, err)
	defer s.Close()
	ran := errors.New("ran again")
	again := func(key string, fp []byte) (oncekv.Result, error) {
		return s.Apply(context.Background(), oncekv.Request{Handler: "orders", Key: key, Payload: []byte("p-" + key), Fingerprint: fp},
			func(context.Context, pgx.Tx) ([]byte, error) { return nil, ran })
	}
	for key, want := range map[string][]byte{"done": []byte("receipt 1"), "nil": nil, "empty": {}, "claimed": []byte("completed")} {
		res, err := again(key, nil)
		if key == "claimed" {
			res, err = s.Apply(context.Background(), oncekv.Request{Handler: "orders", Key: key}, nil)
		}
		require.NoError(t, err, key)
		require.True(t, res.Duplicate, key)
		require.Equal(t, want, res.Response, key)
		require.Equal(t, want == nil, res.Response == nil, key)
		require.Equal(t, now.UnixNano(), res.FirstSeen.UnixNano(), "%s keeps its first-seen time", key)
	}
	res, err := again("fp", []byte("v1:42"))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "by fingerprint", string(res.Response))
	_, err = again("done", []byte("a fingerprint"))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse, "the payload's fingerprint came along")
	_, err = again("failed", nil)
	var fe *oncekv.FailedError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "card declined", fe.Message)
	for _, key := range []string{"old", "held"} {
		_, err := again(key, nil)
		require.ErrorIs(t, err, ran, "%s applies afresh", key)
	}
	c2, err := s.Claim(context.Background(), oncekv.Request{Handler: "orders", Key: "new"}, time.Minute)
	require.NoError(t, err)
	require.Greater(t, c2.Token(), held.Token(), "no claim token is handed out twice")
	require.Equal(t, held.Key(), mustClaimKey(t, s, "held"), "Claim.Key is the same in both stores")
	n, err := s.NextFence(context.Background(), "acct-1")
	require.NoError(t, err)
	require.Equal(t, uint64(4), n)

	cmd = exec.Command(load, "load", "-dsn", dsn, "-schema", schema, dump)
	cmd.Stderr = &stderr
	require.Error(t, cmd.Run())
	require.Contains(t, stderr.String(), "holds 8 marks already; load into a new schema")
}

// mustClaimKey returns the Claim.Key of orders/key in s.
func mustClaimKey(t *testing.T, s *postgres.Store, key string) string {
	c, err := s.Claim(context.Background(), oncekv.Request{Handler: "orders", Key: key, Payload: []byte("p-" + key)}, time.Minute)
	require.NoError(t, err)
	return c.Key()
}
