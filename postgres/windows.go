package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A window is one partition of the marks table, holding the marks first
// seen in [start, start+WindowSpan). Partitions are made ahead of time,
// outside any Apply transaction: CREATE TABLE alone, then ATTACH
// PARTITION, which takes only a SHARE UPDATE EXCLUSIVE lock on the marks
// table, so that neither the duplicate path nor a writer ever waits for
// it (CREATE TABLE ... PARTITION OF would take an ACCESS EXCLUSIVE lock,
// queued behind every open transaction that read the table, and queuing
// every reader behind it).

// windowSet caches the starts of the partitions this Store knows are
// attached, so that a write checks its window without a query. It holds
// at most the live windows (Retention/WindowSpan + 2, at most
// oncekv.MaxWindows + 2): expiry forgets the ones it drops.
type windowSet struct {
	mu struct {
		sync.Mutex
		ready map[int64]bool
	}
}

func (w *windowSet) init() { w.mu.ready = make(map[int64]bool) }

func (w *windowSet) has(start int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.ready[start]
}

func (w *windowSet) add(start int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.ready[start] = true
}

// forget drops start from the cache, after expiry dropped it, or after a
// write found it missing (another host expired it).
func (w *windowSet) forget(start int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.mu.ready, start)
}

// partitionName is the name of the partition of the window starting at
// start (Unix nanoseconds), within the schema: marks_<start>, with n for
// the sign of a start before 1970.
func partitionName(start int64) string {
	if start < 0 {
		return "marks_n" + strconv.FormatInt(-start, 10)
	}
	return "marks_" + strconv.FormatInt(start, 10)
}

// parseTableName is the inverse of partitionName (prefix "marks_") and
// of tombName ("tombs_"); it reports false for a name that is not one of
// the store's partitions.
func parseTableName(prefix, name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" {
		return 0, false
	}
	neg := false
	if rest[0] == 'n' {
		neg, rest = true, rest[1:]
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != rest {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// prepareWindows makes sure the partitions of now's window and of the
// next one are attached: the next one is there before the clock reaches
// it, so a write never waits for DDL.
func (s *Store) prepareWindows(ctx context.Context, now time.Time) error {
	start := s.window.Start(now)
	return errors.Join(s.ensureWindow(ctx, start), s.ensureWindow(ctx, s.window.End(start)))
}

// ensureWindow makes sure the partition of the window starting at start
// is attached, creating it if no host has: in a transaction of its own,
// under the schema's DDL lock, with Options.LockTimeout.
func (s *Store) ensureWindow(ctx context.Context, start int64) error {
	if s.windows.has(start) {
		return nil
	}
	// Most often another host made it: a catalog read, without the lock.
	var attached bool
	if err := s.pool.QueryRow(ctx, attachedSQL, s.q.schema+"."+quote(partitionName(start)), s.q.marks).Scan(&attached); err != nil {
		return fmt.Errorf("oncekv: look for the partition of window %v: %w", timeFromNano(start).UTC(), err)
	}
	if attached {
		s.windows.add(start)
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", s.opts.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", lockSpace, schemaLock(s.opts.Schema, "ddl")); err != nil {
			return err
		}
		name := partitionName(start)
		var exists bool
		err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, ("+attachedSQL+")",
			s.q.schema+"."+quote(name), s.q.marks).Scan(&exists, &attached)
		switch {
		case err != nil:
			return err
		case attached:
			return nil
		case exists:
			// Only expiry leaves a partition detached, and only an expired
			// one; a write never needs it again.
			return fmt.Errorf("oncekv: the partition %s of window %v is being expired", name, timeFromNano(start).UTC())
		}
		p := s.q.schema + "." + quote(name)
		end := s.window.End(start)
		for _, stmt := range []string{
			fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)", p, s.q.marks),
			// The constraint spares ATTACH a scan of the (empty) table.
			fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s CHECK (win >= %d AND win < %d)", p, quote(name+"_window"), start, end),
			fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)", s.q.marks, p, start, end),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("oncekv: create the partition of window %v: %w", timeFromNano(start).UTC(), err)
	}
	s.windows.add(start)
	return nil
}

// attachedSQL reports whether the table $1 is a partition of $2 that is
// not being detached.
const attachedSQL = `SELECT EXISTS (SELECT 1 FROM pg_inherits
	WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass($2) AND NOT inhdetachpending)`

// missingPartition reports whether err is PostgreSQL's "no partition of
// relation found for row": the window of a write is not attached (another
// host expired it, or the clock jumped past the partitions made ahead).
func missingPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" && strings.Contains(pe.Message, "no partition")
}
