package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncekv/oncekv"
)

// maxResource is the longest resource name, the root's key limit (bbolt's),
// so that a name one store takes the other takes too.
const maxResource = 32768

// resourceID validates resource and returns its row id: the SHA-256 of
// the name, so that a name of any allowed size fits a B-tree entry.
func resourceID(resource string) ([]byte, error) {
	switch {
	case resource == "":
		return nil, oncekv.ErrResourceRequired
	case len(resource) > maxResource:
		return nil, fmt.Errorf("resource is %d bytes, over the limit of %d: %w", len(resource), maxResource, oncekv.ErrKeyTooLarge)
	}
	sum := sha256.Sum256([]byte(resource))
	return sum[:], nil
}

// NextFence issues a fencing token for resource: strictly greater than
// every token issued for resource before, by any host, each resource
// counting from 1. The counter's row is updated in a transaction of its
// own, committed (and durable) before NextFence returns, so a token is
// never issued twice; hosts asking at once for the same resource take
// turns on its row.
//
// Errors: oncekv.ErrResourceRequired for an empty resource,
// oncekv.ErrKeyTooLarge for one over 32768 bytes, oncekv.ErrExhausted once
// the counter reaches 2^63-1 (PostgreSQL's bigint), ctx's error,
// oncekv.ErrClosed.
func (s *Store) NextFence(ctx context.Context, resource string) (uint64, error) {
	if !s.enter() {
		return 0, oncekv.ErrClosed
	}
	defer s.exit()
	id, err := resourceID(resource)
	if err == nil {
		var n int64
		err = s.pool.QueryRow(ctx, s.q.nextFence, id, []byte(resource)).Scan(&n)
		if outOfRange(err) {
			err = fmt.Errorf("%w: the counter is at %d", oncekv.ErrExhausted, int64(math.MaxInt64))
		}
		if err == nil {
			return uint64(n), nil
		}
	}
	return 0, &resourceError{op: "next fence", resource: resource, err: err}
}

// AdvanceFence is the fenced write for the caller's own tables: inside
// tx, the caller's transaction (an effect's, or one of its own on the
// same database), it records fence for resource if fence is strictly
// greater than the one recorded, and then holds the resource's row lock
// until tx ends, so that the write to the caller's table that follows in
// tx is fenced: a writer with an older fence that comes later is refused,
// and one that comes at the same time waits for tx, then is refused.
// Tokens from NextFence or from Claim.Token are the fences to pass.
//
// Errors: a *oncekv.FenceError (errors.Is oncekv.ErrFenced) with the
// recorded and the presented fence when fence is not greater: nothing is
// recorded, and tx should roll back; oncekv.ErrInvalidFence for fence 0;
// oncekv.ErrResourceRequired, oncekv.ErrKeyTooLarge; the database's
// errors (a failed statement aborts tx, as any would).
func (s *Store) AdvanceFence(ctx context.Context, tx pgx.Tx, resource string, fence uint64) error {
	if !s.enter() {
		return oncekv.ErrClosed
	}
	defer s.exit()
	id, err := resourceID(resource)
	switch {
	case err != nil:
	case fence == 0:
		err = oncekv.ErrInvalidFence
	case tx == nil:
		err = fmt.Errorf("%w: nil transaction", oncekv.ErrInvalidOptions)
	default:
		err = s.advance(ctx, tx, id, resource, fence)
	}
	if err != nil {
		return &resourceError{op: "advance fence", resource: resource, err: err}
	}
	return nil
}

func (s *Store) advance(ctx context.Context, tx pgx.Tx, id []byte, resource string, fence uint64) error {
	var got string
	err := tx.QueryRow(ctx, s.q.advanceFence, id, []byte(resource), strconv.FormatUint(fence, 10)).Scan(&got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	// Refused: ON CONFLICT locked the row all the same, so what it holds
	// now is what refused the write.
	if err := tx.QueryRow(ctx, s.q.storedFence, id).Scan(&got); err != nil {
		return err
	}
	stored, err := strconv.ParseUint(got, 10, 64)
	if err != nil {
		return &oncekv.RecordError{Bucket: s.opts.Schema + ".fences", Key: resource, Err: err}
	}
	s.stats.fencedWrites.Add(1)
	return &oncekv.FenceError{Stored: stored, Presented: fence}
}

// outOfRange reports whether err is PostgreSQL's numeric_value_out_of_range
// (a bigint counter at its end).
func outOfRange(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "22003" || pe.Code == "2200H")
}

// resourceError names the resource of a failed fence call.
type resourceError struct {
	op, resource string
	err          error
}

func (e *resourceError) Error() string {
	r := e.resource
	if len(r) > 64 {
		r = r[:64] + "…"
	}
	return fmt.Sprintf("oncekv: %s of %q: %s", e.op, r, trimPrefix(e.err))
}

func (e *resourceError) Unwrap() error { return e.err }

// trimPrefix drops the "oncekv: " of a wrapped error's message.
func trimPrefix(err error) string {
	s := err.Error()
	const p = "oncekv: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
