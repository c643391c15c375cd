package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/oncekv/oncekv"
)

// Storage is what the schema's partitions hold and take on disk: for an
// operator, and for a benchmark's bytes per mark (Bytes / Marks).
type Storage struct {
	Windows    []WindowStorage // oldest first
	Marks      int64           // every partition's marks, counted
	Bytes      int64           // every partition's table, indexes and TOAST
	DeadTuples int64           // pg_stat_user_tables.n_dead_tup, summed
	// Parked counts the PARKED marks, waiting for an operator
	// (Store.ResolveParked): the gauge to page on. It is in Marks too.
	Parked int64
	// Tombstones counts the tombstones (Options.TombstoneRetention), and
	// TombstoneBytes is what their partitions take, table and primary
	// key; neither is in Marks or Bytes.
	Tombstones, TombstoneBytes int64
}

// WindowStorage is one partition of Storage.
type WindowStorage struct {
	Start      time.Time
	Marks      int64 // counted: count(*) of the partition
	TableBytes int64 // the heap, with its TOAST: pg_table_size
	IndexBytes int64 // the primary key and the lease index: pg_indexes_size
	// DeadTuples is PostgreSQL's count of the partition's dead tuples
	// (rows updated or deleted and not vacuumed yet), as its backends
	// last reported them; expiry leaves none, since it drops whole
	// partitions.
	DeadTuples int64
	// Detaching is set for a partition an Expire began to detach and did
	// not finish; the next Expire finishes it.
	Detaching bool
}

// Storage reads the catalog's sizes of the schema's partitions and counts
// their marks and tombstones, reading every one once (a scan: an operator's call, not a
// hot path's). The sizes are PostgreSQL's, in bytes, with the free space
// of pages not yet reused.
//
// Errors: ctx's error, oncekv.ErrClosed, the database's errors.
func (s *Store) Storage(ctx context.Context) (Storage, error) {
	if !s.enter() {
		return Storage{}, oncekv.ErrClosed
	}
	defer s.exit()
	var st Storage
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return st, err
	}
	defer conn.Release()
	parts, err := s.partitions(ctx, conn)
	if err != nil {
		return st, err
	}
	for _, p := range parts {
		if !p.attached && !p.detaching {
			continue // detached, about to be dropped
		}
		w := WindowStorage{Start: timeFromNano(p.start), Detaching: p.detaching}
		err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+p.table+`), pg_table_size($1::regclass), pg_indexes_size($1::regclass),
			coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::regclass), 0)`, p.table).
			Scan(&w.Marks, &w.TableBytes, &w.IndexBytes, &w.DeadTuples)
		if err != nil {
			return st, err
		}
		st.Windows = append(st.Windows, w)
		st.Marks += w.Marks
		st.Bytes += w.TableBytes + w.IndexBytes
		st.DeadTuples += w.DeadTuples
	}
	slices.SortFunc(st.Windows, func(a, b WindowStorage) int { return a.Start.Compare(b.Start) })
	if err := conn.QueryRow(ctx, s.q.countParked).Scan(&st.Parked); err != nil {
		return st, err
	}
	tombs, err := s.tables(ctx, conn, s.q.tombs, "tombs_")
	if err != nil {
		return st, err
	}
	for _, p := range tombs {
		if !p.attached && !p.detaching {
			continue
		}
		var n, bytes int64
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+p.table+`), pg_total_relation_size($1::regclass)`, p.table).Scan(&n, &bytes); err != nil {
			return st, err
		}
		st.Tombstones, st.TombstoneBytes = st.Tombstones+n, st.TombstoneBytes+bytes
	}
	return st, nil
}
