package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv"
)

// Tombstones (Options.TombstoneRetention): before expiry detaches a
// window's partition of marks, it copies the window, FirstSeen, state and
// id of each of its DONE and FAILED marks into a partition of the
// tombstones table of its own (tombs_<start>), made and attached in one
// transaction; every look-up reads the tombstones after the marks (in the
// same statement: see queries.go), so a duplicate of a key whose mark is
// gone is still suppressed, with Result.ResponseExpired. A partition of
// tombstones goes whole, as the marks' do, TombstoneRetention after its
// window's end.

// tombName is the name of the partition of tombstones of the window
// starting at start: tombs_<start>, as partitionName.
func tombName(start int64) string { return "tombs" + partitionName(start)[len("marks"):] }

// entomb makes the partition of tombstones of the marks' partition p, in
// one transaction on conn, unless an expiry that died before its detach
// made it already, or p holds no final mark.
func (s *Store) entomb(ctx context.Context, conn *pgxpool.Conn, st *oncekv.ExpireStats, p *partition) error {
	name := tombName(p.start)
	table := s.q.schema + "." + quote(name)
	end := s.window.End(p.start)
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var exists, final bool
		err := tx.QueryRow(ctx, fmt.Sprintf("SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT 1 FROM ONLY %s WHERE state IN (%d, %d))",
			p.table, stateDone, stateFailed), table).Scan(&exists, &final)
		if err != nil || exists || !final {
			return err // made already, or nothing to keep
		}
		for _, stmt := range []string{
			fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)", table, s.q.tombs),
			fmt.Sprintf("INSERT INTO %s (win, first_seen, state, id) SELECT win, first_seen, state, id FROM ONLY %s WHERE state IN (%d, %d)",
				table, p.table, stateDone, stateFailed),
			fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s CHECK (win >= %d AND win < %d)", table, quote(name+"_window"), p.start, end),
			// Builds the primary key's index on the new partition.
			fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)", s.q.tombs, table, p.start, end),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
			st.Steps++
		}
		return nil
	})
}

// expireTombs drops the partitions of tombstones past TombstoneRetention
// at now (every one, once TombstoneRetention is 0), as expire drops the
// marks' partitions, oldest first; conn holds the schema's expiry lock.
func (s *Store) expireTombs(ctx context.Context, conn *pgxpool.Conn, st *oncekv.ExpireStats, now int64) error {
	parts, err := s.tables(ctx, conn, s.q.tombs, "tombs_")
	if err != nil {
		return err
	}
	for _, p := range parts {
		switch {
		case !p.detaching && !p.attached:
		case p.detaching:
			if err := s.ddl(ctx, conn, st, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s FINALIZE", s.q.tombs, p.table)); err != nil {
				return err
			}
		case s.opts.TombstoneRetention > 0 && now < s.tombWindow.ExpiresAt(p.start):
			return nil
		default:
			if err := s.ddl(ctx, conn, st, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY", s.q.tombs, p.table)); err != nil {
				return err
			}
		}
		if err := s.ddl(ctx, conn, st, "DROP TABLE IF EXISTS "+p.table); err != nil {
			return err
		}
	}
	return nil
}
