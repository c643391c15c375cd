package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// benchStore opens a store in a fresh schema with a user table effects(k)
// and returns it with an effect that inserts its key there.
func benchStore(b *testing.B, pool *pgxpool.Pool, opts postgres.Options) (*postgres.Store, func(key string) func(context.Context, pgx.Tx) ([]byte, error)) {
	opts.Schema = freshSchema(b, pool)
	s := openStore(b, pool, opts)
	table := pgx.Identifier{opts.Schema, "effects"}.Sanitize()
	_, err := pool.Exec(context.Background(), "CREATE TABLE "+table+" (k text PRIMARY KEY)")
	require.NoError(b, err)
	insert := "INSERT INTO " + table + " VALUES ($1)"
	return s, func(key string) func(context.Context, pgx.Tx) ([]byte, error) {
		return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			_, err := tx.Exec(ctx, insert, key)
			return nil, err
		}
	}
}

// BenchmarkApplyWindows measures a unique Apply (its effect one INSERT of
// a user row) and a duplicate, with as many live partitions as 7 days of
// windows of each span make: every live partition costs each look-up
// (planning, locks, an index probe), which is why the default span is a
// day.
//
//	ONCEKV_PG_DSN=... go test -run '^$' -bench ApplyWindows ./postgres
func BenchmarkApplyWindows(b *testing.B) {
	pool := newPool(b)
	for _, span := range []time.Duration{24 * time.Hour, 6 * time.Hour, time.Hour} {
		b.Run(fmt.Sprintf("span=%v", span), func(b *testing.B) {
			first := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			var now atomic.Int64
			s, eff := benchStore(b, pool, postgres.Options{WindowSpan: span, Now: func() time.Time { return time.Unix(0, now.Load()) }})
			ctx := context.Background()
			for t := first; t.Before(first.Add(oncekv.DefaultRetention)); t = t.Add(span) {
				now.Store(t.UnixNano()) // a mark in every window of the retention
				_, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: t.String()}, nil)
				require.NoError(b, err)
			}
			var n atomic.Int64
			b.Run("unique", func(b *testing.B) {
				for range b.N {
					key := fmt.Sprint("u", n.Add(1))
					_, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, eff(key))
					require.NoError(b, err)
				}
			})
			b.Run("duplicate", func(b *testing.B) {
				for range b.N {
					res, err := s.Apply(ctx, oncekv.Request{Handler: "h", Key: "u1"}, eff("u1"))
					require.NoError(b, err)
					require.True(b, res.Duplicate)
				}
			})
		})
	}
}

// BenchmarkApplyBatchUndo compares the two ways ApplyBatch can undo the
// effect of one failed request of a batch of 500: rolling the transaction
// back and re-running the others without it (what the store does), or a
// savepoint around every effect. Each iteration runs one batch of each,
// in turns, on two stores of one database, so that both see the same
// load; it reports each one's time per batch, and the statements and
// effect calls each sent per batch (pgx's tracer counts them: a figure
// the machine's noise does not move).
//
//	ONCEKV_PG_DSN=... go test -run '^$' -bench ApplyBatchUndo -benchtime 20x ./postgres
func BenchmarkApplyBatchUndo(b *testing.B) {
	const size = 500
	boom := errors.New("transient")
	for _, failures := range []int{0, 1, 10} {
		b.Run(fmt.Sprintf("failures=%d", failures), func(b *testing.B) {
			var stmts atomic.Int64
			pool := tracedPool(b, &stmts)
			modes := []string{"rerun", "savepoints"}
			type side struct {
				s           *postgres.Store
				eff         func(string) func(context.Context, pgx.Tx) ([]byte, error)
				took        time.Duration
				calls, sent int64
			}
			sides := make([]*side, len(modes))
			for m, mode := range modes {
				s, eff := benchStore(b, pool, postgres.Options{})
				postgres.SetSavepoints(s, mode == "savepoints")
				sides[m] = &side{s: s, eff: eff}
			}
			ctx := context.Background()
			reqs := make([]oncekv.Request, size)
			b.ResetTimer()
			for i := range b.N {
				for k := range modes {
					m := (i + k) % len(modes) // alternate which goes first
					sd := sides[m]
					for j := range reqs {
						reqs[j] = oncekv.Request{Handler: "h", Key: fmt.Sprintf("%d-%d", i, j)}
					}
					before := stmts.Load()
					began := time.Now()
					rs, err := sd.s.ApplyBatch(ctx, reqs, func(ctx context.Context, tx pgx.Tx, j int) ([]byte, error) {
						sd.calls++
						if _, err := sd.eff(reqs[j].Key)(ctx, tx); err != nil {
							return nil, err
						}
						if failures > 0 && j%(size/failures) == size/failures/2 {
							return nil, boom
						}
						return nil, nil
					})
					sd.took += time.Since(began)
					sd.sent += stmts.Load() - before
					require.NoError(b, err)
					bad := 0
					for _, r := range rs {
						if r.Err != nil {
							bad++
						}
					}
					require.Equal(b, failures, bad)
				}
			}
			for m, mode := range modes {
				sd := sides[m]
				b.ReportMetric(float64(sd.took.Milliseconds())/float64(b.N), mode+"-ms/batch")
				b.ReportMetric(float64(sd.sent)/float64(b.N), mode+"-stmts/batch")
				b.ReportMetric(float64(sd.calls)/float64(b.N), mode+"-effects/batch")
			}
		})
	}
}

// tracedPool is a pool on the test cluster that counts in n the
// statements its connections send (a batch's each).
func tracedPool(tb testing.TB, n *atomic.Int64) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(testDSN(tb))
	require.NoError(tb, err)
	cfg.ConnConfig.Tracer = &countingTracer{n: n}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}

type countingTracer struct{ n *atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *countingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *countingTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *countingTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// BenchmarkBytesPerMark applies batches of 500 marks (keys of 36
// characters, a 64-byte response) and reports what the partitions take
// on disk per mark, table and indexes, as Store.Storage reads it.
//
//	ONCEKV_PG_DSN=... go test -run '^$' -bench BytesPerMark -benchtime 40x ./postgres
func BenchmarkBytesPerMark(b *testing.B) {
	s, _ := benchStore(b, newPool(b), postgres.Options{})
	ctx := context.Background()
	n := applyMarks(b, s)
	st, err := s.Storage(ctx)
	require.NoError(b, err)
	require.Equal(b, int64(n), st.Marks)
	var table, index int64
	for _, w := range st.Windows {
		table, index = table+w.TableBytes, index+w.IndexBytes
	}
	b.ReportMetric(float64(st.Bytes)/float64(st.Marks), "bytes/mark")
	b.ReportMetric(float64(table)/float64(st.Marks), "table-bytes/mark")
	b.ReportMetric(float64(index)/float64(st.Marks), "index-bytes/mark")
}

// BenchmarkBytesPerTombstone applies batches of 500 marks as
// BenchmarkBytesPerMark does, expires their window with
// TombstoneRetention on, and reports what the partition of tombstones
// takes on disk per key (table and primary key), against the marks'.
//
//	ONCEKV_PG_DSN=... go test -run '^$' -bench BytesPerTombstone -benchtime 40x ./postgres
func BenchmarkBytesPerTombstone(b *testing.B) {
	pool := newPool(b)
	clock := time.Date(2030, 1, 2, 3, 30, 0, 0, time.UTC)
	s := openStore(b, pool, postgres.Options{Retention: 24 * time.Hour, TombstoneRetention: 72 * time.Hour, WindowSpan: time.Hour,
		Now: func() time.Time { return clock }})
	ctx := context.Background()
	n := applyMarks(b, s)
	st, err := s.Storage(ctx)
	require.NoError(b, err)
	marks := st.Bytes
	clock = clock.Add(26 * time.Hour)
	_, err = s.Expire(ctx)
	require.NoError(b, err)
	st, err = s.Storage(ctx)
	require.NoError(b, err)
	require.Equal(b, int64(n), st.Tombstones)
	b.ReportMetric(float64(st.TombstoneBytes)/float64(n), "bytes/tombstone")
	b.ReportMetric(float64(marks)/float64(n), "bytes/mark")
}

// applyMarks applies b.N batches of 500 marks (keys of 36 characters, a
// 64-byte response), stops the timer and returns how many.
func applyMarks(b *testing.B, s *postgres.Store) int {
	ctx := context.Background()
	resp := make([]byte, 64)
	reqs := make([]oncekv.Request, 500)
	for i := range b.N {
		for j := range reqs {
			reqs[j] = oncekv.Request{Handler: "orders", Key: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, j), Payload: []byte("p")}
		}
		_, err := s.ApplyBatch(ctx, reqs, func(context.Context, pgx.Tx, int) ([]byte, error) { return resp, nil })
		require.NoError(b, err)
	}
	b.StopTimer()
	return b.N * len(reqs)
}
