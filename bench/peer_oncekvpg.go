package main

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv/postgres"
)

// pgSchema is the schema of the oncekv-pg peer's store and of its effects
// table, dropped and created afresh by every open.
const pgSchema = "bench_oncekv"

// oncekvPGStore is the oncekv PostgreSQL store (module postgres/) through
// the protocol: Apply, ApplyBatch, the effect a read-modify-write of a
// 64-byte row of the effects table in the store's transaction, as the
// postgres peer's.
type oncekvPGStore struct {
	pool    *pgxpool.Pool
	s       *postgres.Store
	effects string // the effects table, schema-qualified
	read    string
	write   string
}

// openOncekvPG opens the store in a fresh schema. Sync off is
// synchronous_commit=off, as for the postgres peer. The store keeps its
// default window span (a day: see postgres.DefaultWindowSpan), not the
// embedded store's -span, so that a 7-day retention is 8 partitions.
func openOncekvPG(c storeConfig) (store, error) {
	return openOncekvPGIn(c, pgSchema)
}

func openOncekvPGIn(c storeConfig, schema string) (*oncekvPGStore, error) {
	if c.pgDSN == "" {
		return nil, errNoDSN
	}
	pool, err := pgPool(c)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	sch := pgx.Identifier{schema}.Sanitize()
	effects := sch + ".effects"
	for _, stmt := range []string{
		"DROP SCHEMA IF EXISTS " + sch + " CASCADE",
		"CREATE SCHEMA " + sch,
		"CREATE TABLE " + effects + " (k TEXT PRIMARY KEY, v BYTEA NOT NULL)",
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			pool.Close()
			return nil, err
		}
	}
	s, err := postgres.Open(ctx, pool, postgres.Options{
		Schema:         schema,
		Retention:      c.retention,
		ExpireInterval: -1, // nothing expires within a run
		Now:            c.now,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &oncekvPGStore{pool: pool, s: s, effects: effects,
		read:  "SELECT v FROM " + effects + " WHERE k = $1",
		write: "INSERT INTO " + effects + " (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
	}, nil
}

// pgPool is a pool on c's DSN, with synchronous_commit off when c.sync is.
func pgPool(c storeConfig) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(pgDSN(c))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 16
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// effect reads the key's row and writes it back, like a balance update.
func (s *oncekvPGStore) effect(ctx context.Context, tx pgx.Tx, r *request) ([]byte, error) {
	var prev []byte
	err := tx.QueryRow(ctx, s.read, r.key).Scan(&prev)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if _, err := tx.Exec(ctx, s.write, r.key, nextEffect(prev, r.payload)); err != nil {
		return nil, err
	}
	return r.response, nil
}

func (s *oncekvPGStore) apply(ctx context.Context, r *request) outcome {
	return oncekvOutcome(s.s.Apply(ctx, oncekvRequest(r), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		return s.effect(ctx, tx, r)
	}))
}

func (s *oncekvPGStore) applyBatch(ctx context.Context, rs []request) ([]outcome, error) {
	return oncekvOutcomes(s.s.ApplyBatch(ctx, oncekvRequests(rs), func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error) {
		return s.effect(ctx, tx, &rs[i])
	}))
}

func (s *oncekvPGStore) effectCount(key string) (uint64, error) {
	var v []byte
	err := s.pool.QueryRow(context.Background(), s.read, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return effectCountOf(v), err
}

// diskBytes is the marks' partitions (tables and indexes, as
// Store.Storage reads them) and the effects table.
func (s *oncekvPGStore) diskBytes() (int64, error) {
	ctx := context.Background()
	st, err := s.s.Storage(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", s.effects).Scan(&n)
	return st.Bytes + n, err
}

func (s *oncekvPGStore) close() error {
	err := s.s.Close()
	s.pool.Close()
	return err
}

// isPG reports whether the peer named so runs on PostgreSQL, and so needs
// a DSN.
func isPG(name string) bool { return name == "postgres" || name == "oncekv-pg" }
