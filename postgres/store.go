package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/window"
)

// Store is the oncekv contract (Apply, ApplyBatch, Claim, fences, expiry)
// on a PostgreSQL schema, shared by every host that opens the same schema.
// It is safe for concurrent use. It uses the caller's pool and never
// closes it.
type Store struct {
	pool   *pgxpool.Pool
	opts   Options
	window window.Config
	// tombWindow is window with TombstoneRetention for Retention: when a
	// partition of tombstones expires.
	tombWindow window.Config
	log        *slog.Logger
	clock      clock
	q          queries
	// salt makes keys' advisory locks differ between schemas: two stores
	// of one database never wait for each other.
	salt int64

	life lifecycle

	windows windowSet
	// expireMu lets one Expire of this Store run at a time (the
	// schema's advisory lock orders the hosts).
	expireMu sync.Mutex
	bg       struct {
		stop context.CancelFunc
		done chan struct{}
	}

	stats counters
	// maxResponse is MaxResponseSize, lowered by tests.
	maxResponse int
	// savepoints picks how ApplyBatch undoes one request's failed effect
	// (see batch.go); set by tests and benchmarks only.
	savepoints bool
}

// Open opens the store in the schema Options.Schema of the database pool
// connects to, creating the schema and its tables if missing, or checking
// them (several hosts may open the same schema at once: one creates it,
// the others wait and check it). It then creates the partitions of the
// current and the next window, and starts the background expiry unless
// Options.ExpireInterval is negative. The pool stays the caller's.
//
// Errors: oncekv.ErrInvalidOptions listing every bad field, or for a
// WindowSpan other than the schema's; oncekv.ErrFormatVersion for a
// schema written by a newer version; oncekv.ErrNotOncekv for a schema that
// holds tables of the store's names but no meta; oncekv.ErrCorrupt for a
// meta row that does not decode; the database's errors.
func Open(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", oncekv.ErrInvalidOptions)
	}
	info, err := prepareSchema(ctx, pool, &o)
	if err != nil {
		return nil, err
	}
	o.WindowSpan = info.span
	if err := checkTombs(o.Retention, o.TombstoneRetention, o.WindowSpan); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte("oncekv/" + o.Schema))
	s := &Store{
		pool:        pool,
		opts:        o,
		window:      window.Config{Span: o.WindowSpan, Retention: o.Retention},
		tombWindow:  window.Config{Span: o.WindowSpan, Retention: o.TombstoneRetention},
		log:         o.Logger,
		clock:       clock{inject: o.Now},
		q:           newQueries(quote(o.Schema), o.TombstoneRetention > 0),
		salt:        int64(binary.BigEndian.Uint64(sum[:8])),
		maxResponse: MaxResponseSize,
	}
	s.windows.init()
	s.clock.atLeast(info.clockHigh)
	now, err := s.now(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.prepareWindows(ctx, now); err != nil {
		return nil, err
	}
	if o.ExpireInterval > 0 {
		bctx, stop := context.WithCancel(context.Background())
		s.bg.stop, s.bg.done = stop, make(chan struct{})
		go s.background(bctx)
	}
	return s, nil
}

// MaxResponseSize is the largest response a mark holds, with the message
// of a permanent error counted in: under PostgreSQL's limit of 1 GiB for
// one value, with room for the rest of the row. A larger one fails its
// request with oncekv.ErrResponseTooLarge (the embedded store's limit,
// oncekv.MaxResponseSize, is bbolt's and larger).
const MaxResponseSize = 1<<30 - 1<<20

// Now returns the store's time: Options.Now, or the database's clock as
// last measured plus the local time elapsed since; never earlier than a
// time it returned before. Pass it to oncekv.InProgressError.RetryAfter.
func (s *Store) Now() time.Time { return s.clock.now() }

// Retention is Options.Retention as the store applies it: how long a key
// is deduplicated at least, from when it was first seen.
func (s *Store) Retention() time.Duration { return s.opts.Retention }

// now is Now, measuring the database's clock first when the last measure
// is a minute old.
func (s *Store) now(ctx context.Context) (time.Time, error) {
	if s.clock.stale() {
		var at time.Time
		if err := s.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
			return time.Time{}, fmt.Errorf("oncekv: read the database's clock: %w", err)
		}
		s.clock.measured(at, time.Now())
	}
	return s.clock.now(), nil
}

// Close stops the background expiry, waits for the calls in flight, and
// saves the store's time in the schema, so that a host opened later on a
// clock stepped back cannot revive a lease that ran out. Later calls
// return oncekv.ErrClosed. It leaves the caller's pool open. Closing twice
// returns nil.
func (s *Store) Close() error {
	if s.bg.stop != nil {
		s.bg.stop()
		<-s.bg.done
	}
	if !s.life.close() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.saveClock(ctx)
}

// saveClock raises the schema's saved time to the store's.
func (s *Store) saveClock(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, s.q.saveClock, s.clock.highest()); err != nil {
		return fmt.Errorf("oncekv: save the store's time: %w", err)
	}
	return nil
}

func (s *Store) enter() bool { return s.life.enter() }
func (s *Store) exit()       { s.life.exit() }

// lifecycle counts the calls in flight, so that Close can refuse new ones
// and wait for those running.
type lifecycle struct {
	mu     sync.Mutex
	idle   sync.Cond
	closed bool
	active int
}

func (l *lifecycle) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.active++
	return true
}

func (l *lifecycle) exit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active--; l.active == 0 && l.closed {
		l.idle.Broadcast()
	}
}

// close refuses new calls and waits for those in flight; it reports false
// when the store was closed already.
func (l *lifecycle) close() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.closed = true
	if l.idle.L == nil {
		l.idle.L = &l.mu
	}
	for l.active > 0 {
		l.idle.Wait()
	}
	return true
}

// background runs expiry, which also creates the partitions ahead, every
// Options.ExpireInterval until Close.
func (s *Store) background(ctx context.Context) {
	defer close(s.bg.done)
	t := time.NewTicker(s.opts.ExpireInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			st, err := s.Expire(ctx)
			switch {
			case err != nil && ctx.Err() == nil && !errors.Is(err, oncekv.ErrClosed):
				s.log.Error("background expiry failed", "schema", s.opts.Schema, "err", err)
			case st.Windows > 0:
				s.log.Info("expired windows", "schema", s.opts.Schema, "windows", st.Windows, "marks", st.Marks,
					"longest_step", st.LongestStep, "duration", st.Duration)
			}
		}
	}
}
