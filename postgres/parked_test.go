package postgres_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/markid"
	"github.com/oncekv/oncekv/postgres"
)

// formatOneDDL is the schema as format 1 wrote it (before PARKED marks),
// with one partition made as windows.go makes them: %[1]s is the schema,
// %[2]d the window span, %[3]s the partition, %[4]d and %[5]d its range.
const formatOneDDL = `
CREATE SCHEMA %[1]s;
CREATE TABLE %[1]s.meta (
	singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
	format      integer NOT NULL,
	window_span bigint  NOT NULL,
	clock_high  bigint  NOT NULL
);
CREATE TABLE %[1]s.marks (
	win         bigint   NOT NULL,
	first_seen  bigint   NOT NULL,
	lease_until bigint,
	token       bigint,
	state       smallint NOT NULL CHECK (state BETWEEN 1 AND 3),
	id          bytea    NOT NULL,
	fingerprint bytea    NOT NULL,
	handler     bytea    NOT NULL,
	key         bytea    NOT NULL,
	response    bytea,
	error       bytea,
	PRIMARY KEY (id, win)
) PARTITION BY RANGE (win);
CREATE INDEX marks_leases ON %[1]s.marks (lease_until) WHERE state = 1;
CREATE SEQUENCE %[1]s.claim_tokens AS bigint;
CREATE TABLE %[1]s.fence_counters (id bytea PRIMARY KEY, resource bytea NOT NULL, last bigint NOT NULL);
CREATE TABLE %[1]s.fences (id bytea PRIMARY KEY, resource bytea NOT NULL, fence numeric(20, 0) NOT NULL);
INSERT INTO %[1]s.meta (format, window_span, clock_high) VALUES (1, %[2]d, 0);
CREATE TABLE %[3]s (LIKE %[1]s.marks INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE %[3]s ADD CONSTRAINT w CHECK (win >= %[4]d AND win < %[5]d);
ALTER TABLE %[1]s.marks ATTACH PARTITION %[3]s FOR VALUES FROM (%[4]d) TO (%[5]d)`

// TestFormatOneSchemaMigrates: a schema format 1 wrote, with a partition
// and a DONE mark in it, is migrated at Open: the mark is still a
// duplicate, and a key of that very partition can be parked, listed,
// resolved; the schema says format 2, and an Open again migrates nothing.
func TestFormatOneSchemaMigrates(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	schema := freshSchema(t, pool)
	q := pgx.Identifier{schema}.Sanitize()
	now := time.Date(2030, 1, 2, 3, 30, 0, 0, time.UTC)
	win := now.Truncate(time.Hour)
	part := q + "." + pgx.Identifier{fmt.Sprintf("marks_%d", win.UnixNano())}.Sanitize()
	_, err := pool.Exec(ctx, fmt.Sprintf(formatOneDDL, q, int64(time.Hour), part, win.UnixNano(), win.Add(time.Hour).UnixNano()))
	require.NoError(t, err)
	old := oncekv.Request{Handler: "orders", Key: "old", Payload: []byte("p")}
	mkey, err := markid.Key(old.Handler, old.Key)
	require.NoError(t, err)
	id := sha256.Sum256(mkey)
	fp, err := markid.Fingerprint(old.Payload, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+q+".marks (win, first_seen, state, id, fingerprint, handler, key, response) VALUES ($1, $2, 2, $3, $4, $5, $6, $7)",
		win.UnixNano(), now.UnixNano(), id[:16], fp[:16], []byte(old.Handler), []byte(old.Key), []byte("old response"))
	require.NoError(t, err)

	clock := now
	opts := postgres.Options{Schema: schema, Retention: 24 * time.Hour, Now: func() time.Time { return clock }, ExpireInterval: -1}
	s, err := postgres.Open(ctx, pool, opts)
	require.NoError(t, err)
	res, err := s.Apply(ctx, old, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "old response", string(res.Response))

	r := oncekv.Request{Handler: "orders", Key: "in-doubt", Payload: []byte("p")}
	dead, err := s.Claim(ctx, r, time.Minute)
	require.NoError(t, err)
	clock = clock.Add(time.Minute)
	unknown := &oncekv.ClaimOptions{Probe: func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		return oncekv.OutcomeUnknown, nil, nil
	}}
	_, err = s.ClaimWith(ctx, r, time.Minute, unknown)
	require.ErrorIs(t, err, oncekv.ErrParked)
	var inPart int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM ONLY "+part+" WHERE state = 4").Scan(&inPart))
	require.Equal(t, 1, inPart, "parked in the partition format 1 made")
	var indexed bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 AND indexdef LIKE '%WHERE (state = 4)%')",
		schema, fmt.Sprintf("marks_%d", win.UnixNano())).Scan(&indexed))
	require.True(t, indexed, "the parked index is on the old partition too")
	require.NoError(t, s.Close())

	s, err = postgres.Open(ctx, pool, opts)
	require.NoError(t, err)
	defer s.Close()
	var format int
	require.NoError(t, pool.QueryRow(ctx, "SELECT format FROM "+q+".meta").Scan(&format))
	require.Equal(t, 2, format)
	var parked []oncekv.MarkInfo
	require.NoError(t, s.Parked(ctx, func(m oncekv.MarkInfo) error { parked = append(parked, m); return nil }))
	require.Len(t, parked, 1)
	require.Equal(t, dead.Token(), parked[0].Token)
	require.NoError(t, s.ResolveParked(ctx, r.Handler, r.Key, true, []byte("charged")))
	res, err = s.Apply(ctx, r, nil)
	require.NoError(t, err)
	require.Equal(t, "charged", string(res.Response))
}

// TestMaxParkedIsSharedByHosts: Options.MaxParked caps the keys parked in
// the schema, counted across hosts: at the cap an OutcomeUnknown is
// ErrParkFull, the key stays claimable (taken over again at once, probed
// again), and once a key is resolved another one parks.
func TestMaxParkedIsSharedByHosts(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	schema := freshSchema(t, pool)
	clock := time.Date(2030, 1, 2, 3, 30, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	a := openStore(t, pool, postgres.Options{Schema: schema, Now: now, MaxParked: 1})
	b := openStore(t, pool, postgres.Options{Schema: schema, Now: now, MaxParked: 1})
	unknown := &oncekv.ClaimOptions{Probe: func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		return oncekv.OutcomeUnknown, nil, nil
	}}
	r1 := oncekv.Request{Handler: "charge", Key: "1"}
	r2 := oncekv.Request{Handler: "charge", Key: "2"}
	for _, r := range []oncekv.Request{r1, r2} {
		_, err := a.Claim(ctx, r, time.Minute)
		require.NoError(t, err)
	}
	clock = clock.Add(time.Minute)
	_, err := a.ClaimWith(ctx, r1, time.Minute, unknown)
	require.ErrorIs(t, err, oncekv.ErrParked)
	_, err = b.ClaimWith(ctx, r2, time.Minute, unknown)
	require.ErrorIs(t, err, oncekv.ErrParkFull, "host a's parked key counts on host b")
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
	require.Equal(t, uint64(1), b.Stats().ParkRefused)
	st, err := b.Storage(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Parked)
	c, err := b.Claim(ctx, r2, time.Minute)
	require.NoError(t, err, "released: claimable at once")
	_, taken := c.TakenOver()
	require.True(t, taken)
	require.NoError(t, c.Fail(ctx, nil))
	require.NoError(t, b.ResolveParked(ctx, r1.Handler, r1.Key, false, nil))
	_, err = b.ClaimWith(ctx, r2, time.Minute, unknown)
	require.ErrorIs(t, err, oncekv.ErrParked)
	require.Equal(t, uint64(1), b.Stats().Parked)
	_, err = a.Apply(ctx, r2, nil)
	require.ErrorIs(t, err, oncekv.ErrParked)
	require.Equal(t, uint64(1), a.Stats().ParkedAnswers)
}

// TestLoadMarksRefusesAParkedMark: a parked mark of an embedded store's
// dump is refused, naming why, and nothing is loaded: it must be resolved
// before the move.
func TestLoadMarksRefusesAParkedMark(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	s := openStore(t, pool, postgres.Options{})
	now := s.Now()
	marks := []oncekv.MarkInfo{
		{Handler: "h", Key: "done", State: oncekv.MarkDone, FirstSeen: now, Response: []byte("r")},
		{Handler: "h", Key: "parked", State: oncekv.MarkParked, FirstSeen: now, Token: 3, ParkedAt: now},
	}
	n, err := s.LoadMarks(ctx, marks)
	require.ErrorIs(t, err, oncekv.ErrInvalidMark)
	require.Contains(t, err.Error(), "parked")
	var re *oncekv.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "parked", re.Key)
	require.Zero(t, n)
	res, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "done"}, func(context.Context, pgx.Tx) ([]byte, error) { return []byte("ran"), nil })
	require.NoError(t, err)
	require.False(t, res.Duplicate, "nothing was loaded")
}
