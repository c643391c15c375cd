package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver
)

// dialect is what differs between the SQL peers.
type dialect struct {
	blob     string // the type of payload_hash and response
	isUnique func(error) bool
	// selectFirst looks the mark up in a read before the write
	// transaction, so that a duplicate costs no write lock; without it the
	// write transaction's INSERT finds the duplicate (the article's
	// protocol for PostgreSQL).
	selectFirst bool
	dollar      bool // $1 placeholders instead of ?
}

// sqlStore runs the article's protocol on the processed_messages table:
// INSERT the mark IN_PROGRESS, the effect, UPDATE to DONE with the
// response, in one transaction; on a unique violation, SELECT the mark in a
// new transaction.
type sqlStore struct {
	db *sql.DB
	d  dialect
	q  struct{ insertMark, effect, done, lookup, count string }
}

const sqlSchema = `
CREATE TABLE processed_messages (
	handler         TEXT NOT NULL,
	idempotency_key TEXT NOT NULL,
	state           TEXT NOT NULL,
	payload_hash    %[1]s NOT NULL,
	response        %[1]s,
	lease_until     BIGINT,
	created_at      BIGINT NOT NULL,
	PRIMARY KEY (handler, idempotency_key)
);
CREATE TABLE effects (k TEXT PRIMARY KEY, v %[1]s NOT NULL)`

func newSQLStore(db *sql.DB, d dialect) (*sqlStore, error) {
	s := &sqlStore{db: db, d: d}
	for _, stmt := range strings.Split(fmt.Sprintf(sqlSchema, d.blob), ";") {
		if _, err := db.Exec(stmt); err != nil {
			return nil, errors.Join(err, db.Close())
		}
	}
	s.q.insertMark = s.rebind(`INSERT INTO processed_messages (handler, idempotency_key, state, payload_hash, lease_until, created_at) VALUES (?, ?, 'IN_PROGRESS', ?, ?, ?)`)
	s.q.effect = s.rebind(`INSERT INTO effects (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`)
	s.q.done = s.rebind(`UPDATE processed_messages SET state = 'DONE', response = ?, lease_until = NULL WHERE handler = ? AND idempotency_key = ?`)
	s.q.lookup = s.rebind(`SELECT state, payload_hash, response FROM processed_messages WHERE handler = ? AND idempotency_key = ?`)
	s.q.count = s.rebind(`SELECT v FROM effects WHERE k = ?`)
	return s, nil
}

func (s *sqlStore) rebind(q string) string {
	if !s.d.dollar {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// lookup answers r from its mark; ok is false when there is none.
func (s *sqlStore) lookup(ctx context.Context, q querier, r *request) (o outcome, ok bool) {
	var state string
	var hash, resp []byte
	err := q.QueryRowContext(ctx, s.q.lookup, r.handler, r.key).Scan(&state, &hash, &resp)
	if errors.Is(err, sql.ErrNoRows) {
		return outcome{}, false
	}
	if err != nil {
		return outcome{err: err}, true
	}
	return decide(r, state, hash, resp), true
}

// write runs the protocol's three statements for r in tx.
func (s *sqlStore) write(ctx context.Context, tx querier, r *request) error {
	h := sha256.Sum256(r.payload)
	now := time.Now()
	lease := now.Add(30 * time.Second).UnixNano()
	if _, err := tx.ExecContext(ctx, s.q.insertMark, r.handler, r.key, h[:], lease, now.UnixNano()); err != nil {
		return err
	}
	// The effect reads its row and writes it back, like a balance update.
	var prev []byte
	err := tx.QueryRowContext(ctx, s.q.count, r.key).Scan(&prev)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.q.effect, r.key, nextEffect(prev, r.payload)); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.q.done, r.response, r.handler, r.key)
	return err
}

func (s *sqlStore) apply(ctx context.Context, r *request) outcome {
	if s.d.selectFirst {
		if o, ok := s.lookup(ctx, s.db, r); ok {
			return o
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return outcome{err: err}
	}
	if err := s.write(ctx, tx, r); err != nil {
		_ = tx.Rollback()
		if s.d.isUnique(err) {
			// Applied by someone else: read its mark in a new transaction.
			if o, ok := s.lookup(ctx, s.db, r); ok {
				return o
			}
		}
		return outcome{err: err}
	}
	if err := tx.Commit(); err != nil {
		return outcome{err: err}
	}
	return outcome{response: r.response}
}

func (s *sqlStore) effectCount(key string) (uint64, error) {
	var v []byte
	err := s.db.QueryRow(s.q.count, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return effectCountOf(v), err
}

func (s *sqlStore) close() error { return s.db.Close() }

// sqliteStore adds a batch form: one transaction that looks each request
// up and writes the new ones.
type sqliteStore struct{ *sqlStore }

func openSQLite(durableMode string) func(c storeConfig) (store, error) {
	return func(c storeConfig) (store, error) {
		mode := durableMode
		if !c.sync {
			mode = "OFF"
		}
		dsn := fmt.Sprintf("file:%s?_journal_mode=WAL&_synchronous=%s&_busy_timeout=30000&_txlock=immediate",
			filepath.Join(c.dir, "sqlite.db"), mode)
		db, err := sql.Open("sqlite3", dsn)
		if err != nil {
			return nil, err
		}
		s, err := newSQLStore(db, dialect{
			blob:        "BLOB",
			selectFirst: true,
			isUnique:    isSQLiteConstraint,
		})
		if err != nil {
			return nil, err
		}
		return sqliteStore{s}, nil
	}
}

func (s sqliteStore) applyBatch(ctx context.Context, rs []request) ([]outcome, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	out, err := applyEach(rs, func(r *request) (outcome, error) {
		if o, ok := s.lookup(ctx, tx, r); ok {
			return o, nil // a duplicate or a reuse: this request's answer
		}
		return outcome{response: r.response}, s.write(ctx, tx, r)
	})
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return out, tx.Commit()
}

// openPostgres uses a fresh pair of tables in the DSN's database. Sync off
// is synchronous_commit=off.
func openPostgres(c storeConfig) (store, error) {
	if c.pgDSN == "" {
		return nil, errNoDSN
	}
	db, err := sql.Open("pgx", pgDSN(c))
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(`DROP TABLE IF EXISTS processed_messages, effects`); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	s, err := newSQLStore(db, dialect{
		blob:   "BYTEA",
		dollar: true,
		isUnique: func(err error) bool {
			var e *pgconn.PgError
			return errors.As(err, &e) && e.Code == "23505"
		},
	})
	if err != nil {
		return nil, err
	}
	return pgStore{s}, nil
}

// pgDSN is c's DSN, with synchronous_commit off when c.sync is.
func pgDSN(c storeConfig) string {
	if c.sync {
		return c.pgDSN
	}
	sep := "?"
	if strings.Contains(c.pgDSN, "?") {
		sep = "&"
	}
	return c.pgDSN + sep + "synchronous_commit=off"
}

var errNoDSN = errors.New("bench: no PostgreSQL DSN (-pg-dsn or ONCEKV_BENCH_PG_DSN)")

// pgStore sizes its tables from the server, as its files are not ours.
type pgStore struct{ *sqlStore }

func (s pgStore) diskBytes() (int64, error) {
	var n int64
	err := s.db.QueryRow(`SELECT pg_total_relation_size('processed_messages') + pg_total_relation_size('effects')`).Scan(&n)
	return n, err
}

func (s pgStore) version() (v string, err error) {
	return v, s.db.QueryRow(`SHOW server_version`).Scan(&v)
}
