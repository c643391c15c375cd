package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncekv/oncekv"
)

// formatVersion is the version of the schema's layout this package writes
// and reads. Open refuses a schema of a newer one (oncekv.ErrFormatVersion).
const formatVersion = 2

// The schema's tables. The marks are range-partitioned on the window
// start, win; a partition is one window (see windows.go). id is the first
// 16 bytes of the SHA-256 of the mark key (as oncekv's internal/markid
// makes it), so that a key of any size the root accepts fits a B-tree
// entry; handler and key are kept for listing and dumps, and compared on
// every look-up, so a collision of ids can never answer for another key.
// The times are Unix nanoseconds, as the root's records hold them, so
// both stores place a mark in the same window and replay the same
// FirstSeen. The partial indexes find a window's latest lease and its
// parked marks without a scan, for expiry (see expire.go). attempt_start
// (NULL for a key's first attempt: first_seen), takeovers and parked_at
// describe the attempt a claim or a PARKED mark records (format 2; see
// migrate). A tombstone (Options.TombstoneRetention) is what is left of a
// final mark once its window is past Retention: its window, FirstSeen,
// state and id, in a partition of the tombstones table per window, made
// from the marks' partition before that one is dropped (see tombstones.go).
const schemaDDL = `
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
	state       smallint NOT NULL CONSTRAINT marks_state_check CHECK (state BETWEEN 1 AND 4),
	id          bytea    NOT NULL,
	fingerprint bytea    NOT NULL,
	handler     bytea    NOT NULL,
	key         bytea    NOT NULL,
	response    bytea,
	error       bytea,
	attempt_start bigint,
	takeovers   integer  NOT NULL DEFAULT 0,
	parked_at   bigint,
	PRIMARY KEY (id, win)
) PARTITION BY RANGE (win);
CREATE INDEX marks_leases ON %[1]s.marks (lease_until) WHERE state = 1;
CREATE INDEX marks_parked ON %[1]s.marks (win) WHERE state = 4;
` + tombstonesDDL + `;
CREATE SEQUENCE %[1]s.claim_tokens AS bigint;
CREATE TABLE %[1]s.fence_counters (
	id       bytea  PRIMARY KEY,
	resource bytea  NOT NULL,
	last     bigint NOT NULL
);
CREATE TABLE %[1]s.fences (
	id       bytea          PRIMARY KEY,
	resource bytea          NOT NULL,
	fence    numeric(20, 0) NOT NULL
);
INSERT INTO %[1]s.meta (format, window_span, clock_high) VALUES (%[2]d, %[3]d, 0)`

// tombstonesDDL creates the tombstones table (format 2).
const tombstonesDDL = `CREATE TABLE %[1]s.tombstones (
	win        bigint   NOT NULL,
	first_seen bigint   NOT NULL,
	state      smallint NOT NULL CHECK (state BETWEEN 2 AND 3),
	id         bytea    NOT NULL,
	PRIMARY KEY (id, win)
) PARTITION BY RANGE (win)`

// tables lists the schema's tables, to tell a schema that holds some of
// them but no meta (not oncekv's) from an empty one.
var tables = []string{"meta", "marks", "fence_counters", "fences", "claim_tokens", "tombstones"}

// schemaInfo is what the meta row says.
type schemaInfo struct {
	span      time.Duration
	clockHigh int64
}

// prepareSchema creates the store's schema, or checks the one there, in
// one transaction under a lock of the schema's own, so that hosts opening
// the same schema at once create it once and agree on it.
func prepareSchema(ctx context.Context, pool beginner, o *Options) (schemaInfo, error) {
	var info schemaInfo
	tx, err := pool.Begin(ctx)
	if err != nil {
		return info, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
	q := quote(o.Schema)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", lockSpace, schemaLock(o.Schema, "open")); err != nil {
		return info, err
	}
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
		return info, err
	}
	var present []string
	for _, name := range tables {
		var ok bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q+"."+quote(name)).Scan(&ok); err != nil {
			return info, err
		}
		if ok {
			present = append(present, name)
		}
	}
	switch {
	case len(present) == 0:
		span := o.WindowSpan
		if span == 0 {
			span = min(DefaultWindowSpan, o.Retention)
		}
		if err := checkWindows(o.Retention, span); err != nil {
			return info, err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(schemaDDL, q, formatVersion, int64(span))); err != nil {
			return info, fmt.Errorf("oncekv: create schema %s: %w", q, err)
		}
		info.span = span
	case present[0] != "meta":
		return info, fmt.Errorf("%w: schema %s holds %s but no oncekv meta table: pick another Options.Schema",
			oncekv.ErrNotOncekv, q, strings.Join(present, ", "))
	default:
		var format int
		var span int64
		err := tx.QueryRow(ctx, "SELECT format, window_span, clock_high FROM "+q+".meta").Scan(&format, &span, &info.clockHigh)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return info, &oncekv.RecordError{Bucket: o.Schema + ".meta", Key: "meta", Err: errors.New("the meta row is missing")}
		case err != nil:
			return info, err
		case format > formatVersion:
			return info, fmt.Errorf("%w: schema %s is format %d, this build reads up to %d", oncekv.ErrFormatVersion, q, format, formatVersion)
		case format < 1 || span <= 0:
			return info, &oncekv.RecordError{Bucket: o.Schema + ".meta", Key: "meta", Err: fmt.Errorf("format %d, window span %d", format, span)}
		}
		if format < formatVersion {
			if err := migrate(ctx, tx, q, format); err != nil {
				return info, err
			}
		}
		info.span = time.Duration(span)
		if o.WindowSpan != 0 && o.WindowSpan != info.span {
			return info, fmt.Errorf("%w: WindowSpan = %v: schema %s was created with %v; pass 0 or %v",
				oncekv.ErrInvalidOptions, o.WindowSpan, q, info.span, info.span)
		}
		if err := checkWindows(o.Retention, info.span); err != nil {
			return info, err
		}
	}
	return info, tx.Commit(ctx)
}

// migrations bring a schema of format i+1 to format i+2: migrations[0]
// makes a format 1 schema format 2.
var migrations = []string{
	// 2: PARKED marks (state 4) and the attempt a mark records, for the
	// outcome probe (ClaimWith), and the tombstones table. The new
	// columns take no rewrite (a NULL or constant default); the new CHECK
	// scans the marks once, under the table's lock, and the parked index
	// is built on every partition.
	`ALTER TABLE %[1]s.marks ADD COLUMN attempt_start bigint,
		ADD COLUMN takeovers integer NOT NULL DEFAULT 0, ADD COLUMN parked_at bigint;
	ALTER TABLE %[1]s.marks DROP CONSTRAINT marks_state_check;
	ALTER TABLE %[1]s.marks ADD CONSTRAINT marks_state_check CHECK (state BETWEEN 1 AND 4);
	CREATE INDEX marks_parked ON %[1]s.marks (win) WHERE state = 4;
	` + tombstonesDDL,
}

// migrate brings the schema q, of format from, to formatVersion, in tx
// (prepareSchema's, under the schema's open lock): every host opening it
// at once waits, and the first one migrates. A host of an older build
// refuses the schema from then on (oncekv.ErrFormatVersion); one already
// running reads a PARKED mark as a damaged row (oncekv.ErrCorrupt):
// upgrade every host before a probe can park a key.
func migrate(ctx context.Context, tx pgx.Tx, q string, from int) error {
	for v := from; v < formatVersion; v++ {
		if _, err := tx.Exec(ctx, fmt.Sprintf(migrations[v-1], q)); err != nil {
			return fmt.Errorf("oncekv: migrate schema %s from format %d to %d: %w", q, v, v+1, err)
		}
	}
	_, err := tx.Exec(ctx, "UPDATE "+q+".meta SET format = $1", formatVersion)
	return err
}

// beginner is what prepareSchema needs of a pool.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// quote quotes an identifier for SQL.
func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// lockSpace is the first key of the two-key advisory locks the store takes
// for a schema as a whole (Open, partition DDL, expiry); keys' locks use
// the one-key form, which PostgreSQL keeps apart.
const lockSpace = 0x6f6e6365 // "once"

// schemaLock is the second key of the advisory lock named purpose of the
// schema.
func schemaLock(schema, purpose string) int32 {
	sum := sha256.Sum256([]byte("oncekv/" + schema + "/" + purpose))
	return int32(binary.BigEndian.Uint32(sum[:]))
}
