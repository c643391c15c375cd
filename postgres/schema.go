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
const formatVersion = 1

// The schema's tables. The marks are range-partitioned on the window
// start, win; a partition is one window (see windows.go). id is the first
// 16 bytes of the SHA-256 of the mark key (as oncekv's internal/markid
// makes it), so that a key of any size the root accepts fits a B-tree
// entry; handler and key are kept for listing and dumps, and compared on
// every look-up, so a collision of ids can never answer for another key.
// The times are Unix nanoseconds, as the root's records hold them, so
// both stores place a mark in the same window and replay the same
// FirstSeen. The partial index finds a window's latest lease without a
// scan, for expiry (see expire.go).
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

// tables lists the schema's tables, to tell a schema that holds some of
// them but no meta (not oncekv's) from an empty one.
var tables = []string{"meta", "marks", "fence_counters", "fences", "claim_tokens"}

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
