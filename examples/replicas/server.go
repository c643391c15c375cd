// Package replicas is a payments service run as several replicas behind
// a load balancer, sharing one PostgreSQL schema: the Idempotency-Key
// middleware (idemhttp on the PostgreSQL store, package pgidem) keeps one
// record per (caller, key) for all of them, so a client's retry that
// lands on another replica gets the first answer back instead of a second
// charge. The payment row is written in the transaction that stores the
// answer (pgidem.Stage): both or neither.
//
// Server is one replica; Client a round-robin client retrying with the
// same key on timeouts, dropped connections, 409 and 5xx.
// TestReplicasTortured runs three replicas as real processes against a
// real PostgreSQL and SIGKILLs, pauses and restarts them under eight
// clients.
package replicas

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/postgres"
	"github.com/oncekv/oncekv/postgres/pgidem"
)

// Payment is what a client asks for and what a 201 answers.
type Payment struct {
	Caller  string `json:"caller"`
	ID      string `json:"id"`
	Amount  int64  `json:"amount"`
	Replica string `json:"replica,omitempty"` // the replica that made it
	Token   uint64 `json:"token,omitempty"`   // its claim's fencing token
}

// Config is one replica's.
type Config struct {
	Name   string
	Schema string
	// Lease is the middleware's: how long a replica that died mid-request
	// keeps the key. Default idemhttp's.
	Lease time.Duration
	// Work is the longest a payment takes, drawn at random per request.
	Work time.Duration
}

// Server is one replica: the payments handler behind the middleware.
type Server struct {
	cfg      Config
	store    *postgres.Store
	payments string // the payments table, quoted
	handler  http.Handler
}

// NewServer opens the shared schema (creating it and the payments table
// if missing: replicas may start at once) and builds the handler.
func NewServer(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Server, error) {
	store, err := postgres.Open(ctx, pool, postgres.Options{Schema: cfg.Schema})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, store: store, payments: pgx.Identifier{cfg.Schema, "payments"}.Sanitize()}
	if err := s.createTable(ctx, pool); err != nil {
		_ = store.Close()
		return nil, err
	}
	mw, err := pgidem.New(store, &idemhttp.Options{
		Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-Caller"), nil },
		Lease: cfg.Lease,
	})
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.Wrap(http.HandlerFunc(s.pay)))
	s.handler = mux
	return s, nil
}

// createTable creates the payments table once, under a lock: concurrent
// CREATE TABLE IF NOT EXISTS may fail on PostgreSQL's catalog.
func (s *Server) createTable(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", s.payments); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+s.payments+
			" (key text NOT NULL, caller text NOT NULL, id text NOT NULL, amount bigint NOT NULL, replica text NOT NULL, token bigint NOT NULL)")
		return err
	})
}

// Handler is the replica's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Close closes the replica's store (not the pool).
func (s *Server) Close() error { return s.store.Close() }

// pay makes a payment: the row is staged, so it commits with the stored
// 201 or not at all. The row deliberately has no unique key: a second run
// of a payment would show as a second row.
func (s *Server) pay(w http.ResponseWriter, r *http.Request) {
	var p Payment
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.ID == "" || p.Caller != r.Header.Get("X-Caller") {
		_ = idemhttp.DoNotStore(r)
		http.Error(w, "bad payment", http.StatusBadRequest)
		return
	}
	p.Replica, p.Token = s.cfg.Name, idemhttp.Token(r)
	key := idemhttp.Key(r)
	if s.cfg.Work > 0 {
		select {
		case <-time.After(rand.N(s.cfg.Work)):
		case <-r.Context().Done():
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return
		}
	}
	err := pgidem.Stage(r, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+s.payments+" VALUES ($1, $2, $3, $4, $5, $6)",
			key, p.Caller, p.ID, p.Amount, p.Replica, int64(p.Token))
		return err
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/payments/%s", key[:16]))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(p)
}
