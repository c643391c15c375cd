package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv"
)

// Expire drops every window whose newest possible mark is older than
// Options.Retention by the store's clock, and makes sure the partitions
// of the current and the next window exist. A key whose window was
// dropped is applied again if it is delivered again: that is the dedup
// window.
//
// A window goes whole: its partition is detached with DETACH PARTITION
// ... CONCURRENTLY, which lets readers and writers of the other
// partitions carry on (new queries stop seeing it at once; the detach
// waits for the transactions that started before), then dropped. No row
// is deleted, so no dead tuple and no bloat is left, and the cost does not
// depend on how many marks the window holds. Every statement runs with
// Options.LockTimeout: a detach that times out (behind a long
// transaction) stays pending, and the next Expire finishes it. Hosts
// running Expire at once take turns on the schema's expiry lock; the
// later ones find the work done.
//
// A window holding a claim whose lease has not run out is kept until it
// has, and so are the windows after it (the root's rule). A PARKED mark
// is moved to the current window first, under its key's lock, so that it
// stays until an operator resolves it (Store.ResolveParked). ExpireStats'
// Marks is PostgreSQL's estimate of the rows of the dropped partitions
// (pg_class.reltuples, as the last VACUUM or ANALYZE counted them), not a
// count: counting would cost a scan of the window. Steps counts the DDL
// statements, LongestStep the longest of them.
func (s *Store) Expire(ctx context.Context) (oncekv.ExpireStats, error) {
	if !s.enter() {
		return oncekv.ExpireStats{}, oncekv.ErrClosed
	}
	defer s.exit()
	s.expireMu.Lock()
	defer s.expireMu.Unlock()
	began := time.Now()
	var st oncekv.ExpireStats
	err := s.expire(ctx, &st)
	st.Duration = time.Since(began)
	return st, err
}

func (s *Store) expire(ctx context.Context, st *oncekv.ExpireStats) (err error) {
	now, err := s.now(ctx)
	if err != nil {
		return err
	}
	if err := s.prepareWindows(ctx, now); err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", s.opts.LockTimeout.Milliseconds())); err != nil {
		return err
	}
	lock := schemaLock(s.opts.Schema, "expire")
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", lockSpace, lock); err != nil {
		conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // the lock, if taken, dies with the session
		return err
	}
	defer func() {
		bctx := context.WithoutCancel(ctx)
		_, uerr := conn.Exec(bctx, "SELECT pg_advisory_unlock($1, $2)", lockSpace, lock)
		if uerr == nil {
			_, uerr = conn.Exec(bctx, "RESET lock_timeout")
		}
		if uerr != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // the lock dies with the session
		}
	}()
	parts, err := s.partitions(ctx, conn)
	if err != nil {
		return err
	}
	n := now.UnixNano()
	for _, p := range parts {
		if !p.detaching && !p.attached {
			// Detached by an Expire that died before its DROP.
			if err := s.ddl(ctx, conn, st, "DROP TABLE IF EXISTS "+p.table); err != nil {
				return err
			}
			continue
		}
		if !p.detaching {
			if n < s.window.ExpiresAt(p.start) {
				break
			}
			var lease *int64
			if err := conn.QueryRow(ctx, "SELECT max(lease_until) FROM ONLY "+p.table+" WHERE state = 1").Scan(&lease); err != nil {
				return err
			}
			if lease != nil && n < *lease {
				break // a live claim keeps this window, and the ones after it
			}
			if err := s.carryParked(ctx, conn, &p, s.window.Start(now)); err != nil {
				return fmt.Errorf("oncekv: expire: carry the parked marks of %s: %w", p.table, err)
			}
			if s.opts.TombstoneRetention > 0 {
				if err := s.entomb(ctx, conn, st, &p); err != nil {
					return fmt.Errorf("oncekv: expire: the tombstones of %s: %w", p.table, err)
				}
			}
			if err := s.ddl(ctx, conn, st, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY", s.q.marks, p.table)); err != nil {
				return err
			}
		} else if err := s.ddl(ctx, conn, st, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s FINALIZE", s.q.marks, p.table)); err != nil {
			return err
		}
		s.windows.forget(p.start)
		if err := s.ddl(ctx, conn, st, "DROP TABLE IF EXISTS "+p.table); err != nil {
			return err
		}
		st.Windows++
		st.Marks += uint64(max(p.rows, 0))
		s.stats.expiredWindows.Add(1)
	}
	if err := s.expireTombs(ctx, conn, st, n); err != nil {
		return err
	}
	return s.saveClock(ctx)
}

// ddl runs one statement of expiry, timing it.
func (s *Store) ddl(ctx context.Context, conn *pgxpool.Conn, st *oncekv.ExpireStats, stmt string) error {
	began := time.Now()
	_, err := conn.Exec(ctx, stmt)
	st.Steps++
	st.LongestStep = max(st.LongestStep, time.Since(began))
	if err != nil {
		return fmt.Errorf("oncekv: expire: %s: %w", stmt, err)
	}
	return nil
}

// partition is one table of the store's partitions, as the catalog lists
// it.
type partition struct {
	start     int64
	table     string // schema-qualified and quoted
	attached  bool
	detaching bool    // DETACH ... CONCURRENTLY began and did not finish
	rows      float32 // pg_class.reltuples: -1 when never counted
}

// partitions lists the store's partitions, oldest window first: those
// attached to the marks table (or being detached from it), and tables of
// partitions' names left behind by an Expire that died between its
// detach and its drop.
func (s *Store) partitions(ctx context.Context, conn *pgxpool.Conn) ([]partition, error) {
	return s.tables(ctx, conn, s.q.marks, "marks_")
}

// tables is partitions for the partitions of parent whose names begin
// with prefix.
func (s *Store) tables(ctx context.Context, conn *pgxpool.Conn, parent, prefix string) ([]partition, error) {
	rows, err := conn.Query(ctx, `
		SELECT c.relname, i.inhrelid IS NOT NULL, coalesce(i.inhdetachpending, false), c.reltuples
		FROM pg_class c
		LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = to_regclass($2)
		WHERE c.relnamespace = to_regnamespace($1) AND c.relkind = 'r' AND starts_with(c.relname, $3)`,
		s.q.schema, parent, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var parts []partition
	for rows.Next() {
		var name string
		var p partition
		if err := rows.Scan(&name, &p.attached, &p.detaching, &p.rows); err != nil {
			return nil, err
		}
		start, ok := parseTableName(prefix, name)
		if !ok {
			continue // not one of the store's names: not its table
		}
		p.start, p.table = start, s.q.schema+"."+quote(name)
		if p.detaching {
			p.attached = false
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(parts, func(a, b partition) int { return cmp.Compare(a.start, b.start) })
	return parts, nil
}
