package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv"
)

// The expiry cell (issue 19): one window of N marks expired on each
// PostgreSQL peer, in turns, while one client sends duplicates of live
// keys. oncekv-pg drops the window's partition (Store.Expire: DETACH
// PARTITION ... CONCURRENTLY, DROP TABLE); the article's table deletes its
// rows (DELETE ... WHERE created_at < ...). For each: how long the expiry
// took, the dead tuples and the table's size after it, and the duplicate
// path's p99 while it ran against before it.

// pgExpireResult is one peer's expiry of one window.
type pgExpireResult struct {
	peer  string
	marks int // in the expired window
	live  int // marks of the live window, which stay
	took  time.Duration
	// oncekv-pg only: the DDL statements of the measured Expire, and the
	// longest of them (ExpireStats' Steps and LongestStep).
	steps   int
	longest time.Duration
	// The marks' table (oncekv-pg: every partition, indexes included;
	// postgres: processed_messages with its index), and its dead tuples,
	// just before and just after the expiry.
	bytesBefore, bytesAfter int64
	deadBefore, deadAfter   int64
	// The article's table only: a VACUUM after the DELETE, which is the
	// rest of its expiry's cost, and the table's size after it.
	vacuum      time.Duration
	bytesVacuum int64
	// The duplicate path, one client: p99 of the calls before the expiry
	// began, and of those that overlapped it, and how many of each.
	p99Before, p99During time.Duration
	nBefore, nDuring     int
}

// pgExpireBaseline is how long duplicates run before the expiry starts,
// and pgExpireTail how long after it ends.
const (
	pgExpireBaseline = time.Second
	pgExpireTail     = 200 * time.Millisecond
)

// pgExpireLive is how many live marks the duplicates are drawn from.
func (b *bench) pgExpireLive() int { return min(10_000, b.cfg.fastKeys) }

// pgExpireCell measures every size of -pg-expire-marks on both
// PostgreSQL peers, the sizes in turn and, at each, oncekv-pg first.
func (b *bench) pgExpireCell() ([]pgExpireResult, error) {
	var out []pgExpireResult
	for _, n := range b.cfg.pgExpireMarks {
		for _, side := range []struct {
			peer string
			run  func(n int) (pgExpireResult, error)
		}{{"oncekv-pg", b.expireOncekvPG}, {"postgres", b.expireArticle}} {
			if !b.cfg.wanted(side.peer) {
				continue
			}
			t0 := time.Now()
			r, err := side.run(n)
			if err != nil {
				return nil, fmt.Errorf("expiry of %d marks, %s: %w", n, side.peer, err)
			}
			progress("%-40s took %v; after: %d dead tuples, %d -> %d bytes; dup p99 %v before, %v during (%d calls) (%v)",
				fmt.Sprintf("%s expire %d", r.peer, n), r.took.Round(time.Microsecond), r.deadAfter, r.bytesBefore, r.bytesAfter,
				r.p99Before.Round(time.Microsecond), r.p99During.Round(time.Microsecond), r.nDuring, time.Since(t0).Round(100*time.Millisecond))
			out = append(out, r)
		}
	}
	return out, nil
}

// expireOncekvPG fills one window of the store with n marks (ApplyBatch,
// marks only), a later one with the live marks, and drops the first with
// Store.Expire. The store's clock is the cell's: windows are a day, as the
// store's default, and Retention 7.5 days, so that the partitions of the
// current and the next window exist before the measured Expire, which then
// does nothing but drop.
func (b *bench) expireOncekvPG(n int) (r pgExpireResult, err error) {
	const day = 24 * time.Hour
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	set := func(t time.Time) { clock.Store(t.UnixNano()) }
	set(t0.Add(time.Hour))
	c := b.storeConfig("", true)
	c.retention = 7*day + 12*time.Hour
	c.now = func() time.Time { return time.Unix(0, clock.Load()) }
	s, err := openOncekvPGIn(c, pgSchema+"_expire")
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	ctx := context.Background()
	reqs := make([]oncekv.Request, b.cfg.batch)
	for lo := 0; lo < n; lo += len(reqs) {
		m := min(len(reqs), n-lo)
		for j := range m {
			reqs[j] = oncekv.Request{Handler: "bench", Key: fmt.Sprintf("old-%09d", lo+j), Payload: []byte("p")}
		}
		if err := checkBatch(s.s.ApplyBatch(ctx, reqs[:m], nil)); err != nil {
			return r, err
		}
	}
	set(t0.Add(7*day + 12*time.Hour)) // the live window: days 7 to 8
	live := requests("live", b.pgExpireLive(), b.cfg)
	if err := load(s, live, b.cfg); err != nil {
		return r, err
	}
	expiresAt := t0.Add(day + c.retention) // the first window's end, plus Retention
	set(expiresAt.Add(-time.Second))
	if st, err := s.s.Expire(ctx); err != nil || st.Windows != 0 {
		return r, fmt.Errorf("the Expire before: %+v, %w", st, err)
	}
	before, err := s.s.Storage(ctx)
	if err != nil {
		return r, err
	}
	r = pgExpireResult{peer: "oncekv-pg", marks: n, live: len(live), bytesBefore: before.Bytes, deadBefore: before.DeadTuples}
	if _, err := s.pool.Exec(ctx, "CHECKPOINT"); err != nil { // the load's writes, out of the way
		return r, err
	}
	r.took, r.p99Before, r.p99During, r.nBefore, r.nDuring, err = duplicatesDuring(s, live, func() error {
		set(expiresAt.Add(time.Second))
		st, err := s.s.Expire(ctx)
		if err == nil && st.Windows != 1 {
			err = fmt.Errorf("expired %d windows, want 1 (%+v)", st.Windows, st)
		}
		r.steps, r.longest = st.Steps, st.LongestStep
		return err
	})
	if err != nil {
		return r, err
	}
	after, err := s.s.Storage(ctx)
	if err != nil {
		return r, err
	}
	if after.Marks != int64(len(live)) {
		return r, fmt.Errorf("%d marks after the expiry, want the %d live ones", after.Marks, len(live))
	}
	r.bytesAfter, r.deadAfter = after.Bytes, after.DeadTuples
	return r, nil
}

// checkBatch is the first error of an ApplyBatch.
func checkBatch(rs []oncekv.BatchResult, err error) error {
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// expireArticle fills the article's processed_messages table with n DONE
// rows 8 days old (one INSERT ... SELECT: loading them through the
// protocol would take minutes, and only the expiry is measured), the
// live marks through the protocol, VACUUMs it as autovacuum would have
// by then, and expires the old rows with the article's DELETE.
func (b *bench) expireArticle(n int) (r pgExpireResult, err error) {
	st, err := openPostgres(b.storeConfig("", true))
	if err != nil {
		return r, err
	}
	s := st.(pgStore)
	defer func() { err = errors.Join(err, s.close()) }()
	ctx := context.Background()
	now := time.Now()
	if _, err := s.db.ExecContext(ctx, `INSERT INTO processed_messages (handler, idempotency_key, state, payload_hash, response, created_at)
		SELECT 'bench', 'old-' || lpad(g::text, 9, '0'), 'DONE', sha256(convert_to(g::text, 'UTF8')),
			convert_to(repeat('r', $2), 'UTF8'), $3
		FROM generate_series(1, $1) g`, n, b.cfg.response, now.Add(-8*24*time.Hour).UnixNano()); err != nil {
		return r, err
	}
	live := requests("live", b.pgExpireLive(), b.cfg)
	if err := load(s, live, b.cfg); err != nil {
		return r, err
	}
	if _, err := s.db.ExecContext(ctx, `VACUUM (ANALYZE) processed_messages`); err != nil {
		return r, err
	}
	r = pgExpireResult{peer: "postgres", marks: n, live: len(live)}
	if r.bytesBefore, r.deadBefore, err = s.tableStats(ctx); err != nil {
		return r, err
	}
	if _, err := s.db.ExecContext(ctx, "CHECKPOINT"); err != nil { // the load's writes, out of the way
		return r, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, conn.Close()) }()
	cutoff := now.Add(-7 * 24 * time.Hour).UnixNano()
	r.took, r.p99Before, r.p99During, r.nBefore, r.nDuring, err = duplicatesDuring(s, live, func() error {
		res, err := conn.ExecContext(ctx, `DELETE FROM processed_messages WHERE created_at < $1`, cutoff)
		if err != nil {
			return err
		}
		if d, err := res.RowsAffected(); err != nil || d != int64(n) {
			return fmt.Errorf("deleted %d rows, want %d (%v)", d, n, err)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	// Its counters reach pg_stat_user_tables when the backend next reports.
	if _, err := conn.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return r, err
	}
	if r.bytesAfter, r.deadAfter, err = s.tableStats(ctx); err != nil {
		return r, err
	}
	t := time.Now()
	if _, err := s.db.ExecContext(ctx, `VACUUM processed_messages`); err != nil {
		return r, err
	}
	r.vacuum = time.Since(t)
	r.bytesVacuum, _, err = s.tableStats(ctx)
	return r, err
}

// tableStats is the size of processed_messages with its index, and its
// dead tuples as PostgreSQL's statistics count them.
func (s pgStore) tableStats(ctx context.Context) (bytes, dead int64, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT pg_total_relation_size('processed_messages'),
		coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'processed_messages'::regclass), 0)`).Scan(&bytes, &dead)
	return bytes, dead, err
}

// duplicatesDuring sends duplicates of live from one client for
// pgExpireBaseline, then runs expire while they go on, and for
// pgExpireTail after it. It returns expire's time, and the p99 (and
// number) of the duplicates that began before expire did, and of those
// that overlapped it.
func duplicatesDuring(s store, live []request, expire func() error) (took, p99Before, p99During time.Duration, nBefore, nDuring int, err error) {
	type call struct{ start, end time.Time }
	var calls []call
	var dupErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			r := &live[rng.IntN(len(live))]
			t := time.Now()
			o := s.apply(context.Background(), r)
			calls = append(calls, call{t, time.Now()})
			if o.err == nil && !o.duplicate {
				o.err = fmt.Errorf("request %s: not a duplicate", r.key)
			}
			if o.err != nil {
				dupErr = o.err
				return
			}
		}
	})
	time.Sleep(pgExpireBaseline)
	began := time.Now()
	err = expire()
	ended := time.Now()
	time.Sleep(pgExpireTail)
	close(stop)
	wg.Wait()
	if err = errors.Join(err, dupErr); err != nil {
		return 0, 0, 0, 0, 0, err
	}
	var before, during []time.Duration
	for _, c := range calls {
		switch {
		case c.end.Before(began):
			before = append(before, c.end.Sub(c.start))
		case c.start.Before(ended):
			during = append(during, c.end.Sub(c.start))
		}
	}
	return ended.Sub(began), p99(before), p99(during), len(before), len(during), nil
}

// p99 is the 99th percentile of ds; 0 for none.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}

// expiryTable is the expiry cell's part of the report.
func (st *suite) expiryTable(b *strings.Builder) {
	if len(st.expiry) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### PostgreSQL: expiring a window\n\nOne window of N marks expired while one client sends duplicates of %d live marks: "+
		"oncekv-pg's Store.Expire (DETACH PARTITION ... CONCURRENTLY, DROP TABLE) and the article's `DELETE FROM processed_messages WHERE created_at < ...`. "+
		"Bytes are the marks' table with its indexes (oncekv-pg: every partition); dead tuples are pg_stat_user_tables.n_dead_tup "+
		"(the article's include the failed INSERT of every duplicate); for the article's table, the VACUUM that reclaims the deleted rows, after the DELETE. "+
		"Longest step: oncekv-pg's longest DDL statement of the Expire (ExpireStats.LongestStep), of its DDL statements. "+
		"Duplicate p99: the calls that ended before the expiry began, and those that overlapped it.\n\n", st.expiry[0].live)
	b.WriteString("| peer | window marks | expiry took | longest step (of) | dead tuples before / after | bytes before / after | VACUUM after | bytes after VACUUM | dup p99 before / during | dup calls before / during |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range st.expiry {
		vac, vacBytes, step := "–", "–", "–"
		if r.steps > 0 {
			step = fmt.Sprintf("%v (%d)", r.longest.Round(time.Millisecond), r.steps)
		}
		if r.vacuum > 0 {
			vac, vacBytes = r.vacuum.Round(time.Millisecond).String(), strconv.FormatInt(r.bytesVacuum, 10)
		}
		fmt.Fprintf(b, "| %s | %d | %v | %s | %d / %d | %d / %d | %s | %s | %v / %v | %d / %d |\n", r.peer, r.marks,
			r.took.Round(time.Millisecond), step, r.deadBefore, r.deadAfter, r.bytesBefore, r.bytesAfter, vac, vacBytes,
			r.p99Before.Round(time.Microsecond), r.p99During.Round(time.Microsecond), r.nBefore, r.nDuring)
	}
}

// expiryOf is the expiry of peer's window of the largest size measured
// (nil for none), and of the smallest.
func (st *suite) expiryOf(peer string) (largest, smallest *pgExpireResult) {
	for i := range st.expiry {
		r := &st.expiry[i]
		if r.peer != peer {
			continue
		}
		if largest == nil || r.marks > largest.marks {
			largest = r
		}
		if smallest == nil || r.marks < smallest.marks {
			smallest = r
		}
	}
	return largest, smallest
}

// pgTargets are issue 19's goals for the PostgreSQL store, each against
// the article's insert-first protocol (the postgres peer) measured in the
// same run, or against itself.
func (st *suite) pgTargets() []target {
	n := st.cfg.clients
	pg := func(kind string, clients int) float64 { return st.rate("oncekv-pg", kind, true, clients) }
	article := func(kind string, clients int) float64 { return st.rate("postgres", kind, true, clients) }
	ts := []target{
		ratio("pg-dup", "oncekv-pg duplicates/s / the insert-first postgres protocol's, 1 client", pg(kindDup, 1), article(kindDup, 1), 5),
		ratio("pg-cN", fmt.Sprintf("oncekv-pg durable unique, %d clients / the insert-first postgres protocol's %d clients", n, n),
			pg(kindUnique, n), article(kindUnique, n), 3),
		ratio("pg-batch", fmt.Sprintf("oncekv-pg ApplyBatch of %d durable / the insert-first postgres protocol's durable 1 client", st.cfg.batch),
			pg(kindBatch, 1), article(kindUnique, 1), 20),
	}
	big, small := st.expiryOf("oncekv-pg")
	const expiry = "oncekv-pg expiry (partition drop, next to the insert-first postgres table's DELETE)"
	switch {
	case big == nil:
		ts = append(ts,
			target{id: "pg-expire-const", name: expiry + ": time at the largest window / the smallest", missing: "no expiry cell: -pg-dsn and -pg-expire-marks"},
			target{id: "pg-expire-dead", name: expiry + ": dead tuples after", missing: "no expiry cell"},
			target{id: "pg-expire-p99", name: expiry + ": duplicate p99 during / before", missing: "no expiry cell"})
		return ts
	case big == small:
		ts = append(ts, target{id: "pg-expire-const", name: expiry + ": time at the largest window / the smallest",
			missing: "one window size: give -pg-expire-marks two (-full: 100000,1000000)"})
	default:
		ts = append(ts, atMost("pg-expire-const", fmt.Sprintf("%s: time for a window of %d marks / of %d", expiry, big.marks, small.marks),
			big.took.Seconds(), small.took.Seconds(), 1.5))
	}
	ts = append(ts,
		target{id: "pg-expire-dead", name: fmt.Sprintf("%s: dead tuples after expiring %d marks", expiry, big.marks),
			got: float64(big.deadAfter), want: 0, atMost: true},
		atMost("pg-expire-p99", fmt.Sprintf("%s: duplicate p99 while expiring %d marks / before, 1 client", expiry, big.marks),
			float64(big.p99During), float64(big.p99Before), 2))
	return ts
}
