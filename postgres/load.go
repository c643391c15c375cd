package postgres

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"time"

	"github.com/oncekv/oncekv"
)

// LoadMarks writes marks, as an embedded store's DB.Marks lists them (or
// `oncekv dump` writes them), into this store, in one transaction: for
// moving the dedup state of a bbolt file to PostgreSQL without applying a
// key twice. Each mark keeps its state, fingerprint, response or error,
// token and FirstSeen, so that a delivery of its key is answered as a
// duplicate with the same response, and Retention counts from when the
// key was first seen. It goes into the partition of its Window (of its
// FirstSeen when Window is zero): PostgreSQL windows are at least as long
// as the embedded store's, so it expires no sooner than it would have
// there. A mark whose window has expired by this store's clock is
// skipped: loaded says how many were written.
//
// Only DONE and FAILED marks are loaded. A claim in progress is refused
// with oncekv.ErrInProgress: its worker belongs to the other store; a
// PARKED mark with oncekv.ErrInvalidMark: resolve it before the move.
// Raise the claim tokens with RaiseCounter first, so that a claim taken
// here after the move gets a greater token than any handed out there.
//
// Errors, each wrapped in an *oncekv.RequestError naming the handler and
// key, and nothing is written when one is returned: an error matching
// fs.ErrExist when the key has a mark here already (or is given twice);
// oncekv.ErrInProgress, for a claim, or for a key another transaction
// holds right now; oncekv.ErrInvalidMark for a parked mark and for a
// State that is none of the MarkState values; oncekv.ErrResponseTooLarge; the bad input errors of
// Apply; oncekv.ErrClosed; the database's errors.
func (s *Store) LoadMarks(ctx context.Context, marks []oncekv.MarkInfo) (loaded int, err error) {
	if !s.enter() {
		return 0, oncekv.ErrClosed
	}
	defer s.exit()
	now, err := s.now(ctx)
	if err != nil {
		return 0, err
	}
	ops := make([]*op, 0, len(marks))
	rows := make([]*mark, 0, len(marks))
	seen := make(map[string]bool, len(marks))
	for i := range marks {
		m := &marks[i]
		start := s.window.Start(loadTime(m))
		if s.window.ExpiresAt(start) <= now.UnixNano() {
			continue
		}
		req := oncekv.Request{Handler: m.Handler, Key: m.Key}
		row, o, err := s.loadRow(m, start)
		if err == nil && seen[o.id.claimKey] {
			err = fmt.Errorf("oncekv: load mark: the key is loaded twice: %w", fs.ErrExist)
		}
		if err != nil {
			return 0, requestError("load mark", &req, err)
		}
		seen[o.id.claimKey] = true
		ops, rows = append(ops, o), append(rows, row)
	}
	if len(ops) == 0 {
		return 0, nil
	}
	for _, r := range rows {
		if err := s.ensureWindow(ctx, r.win); err != nil {
			return 0, err
		}
	}
	return len(ops), s.loadTx(ctx, ops, rows)
}

// loadRow checks one mark of LoadMarks and returns its row, and an op
// naming its key.
func (s *Store) loadRow(m *oncekv.MarkInfo, start int64) (*mark, *op, error) {
	id, err := identify(&oncekv.Request{Handler: m.Handler, Key: m.Key}, s.salt)
	if err != nil {
		return nil, nil, err
	}
	switch m.State {
	case oncekv.MarkDone, oncekv.MarkFailed:
	case oncekv.MarkParked:
		return nil, nil, fmt.Errorf("oncekv: load mark: a parked mark is not loaded: resolve it first (oncekv resolve): %w", oncekv.ErrInvalidMark)
	case oncekv.MarkInProgress:
		return nil, nil, fmt.Errorf("%w: a claim in progress is not loaded", oncekv.ErrInProgress)
	default:
		return nil, nil, fmt.Errorf("oncekv: load mark: unknown state %d: %w", m.State, oncekv.ErrInvalidMark)
	}
	if err := s.checkResponse(len(m.Response) + len(m.Error)); err != nil {
		return nil, nil, err
	}
	if m.Token > math.MaxInt64 {
		return nil, nil, fmt.Errorf("oncekv: load mark: token %d is over PostgreSQL's bigint: %w", m.Token, oncekv.ErrInvalidMark)
	}
	id.fp = m.Fingerprint[:fingerprintSize] // a full SHA-256 of an older dump keeps its first 16 bytes
	row := &mark{
		win: start, firstSeen: m.FirstSeen.UnixNano(), token: m.Token, state: int16(m.State),
		fp: id.fp, response: cloneNil(m.Response), errMsg: m.Error,
	}
	return row, &op{req: &oncekv.Request{Handler: m.Handler, Key: m.Key}, id: id}, nil
}

// loadTx writes the rows of ops in one transaction, under their keys'
// locks, after checking that none has a mark yet.
func (s *Store) loadTx(ctx context.Context, ops []*op, rows []*mark) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
	held, err := s.lockAndRead(ctx, tx, ops)
	if err != nil {
		return err
	}
	w := newWrites(s, 0, 0)
	for i, o := range ops {
		k := held[o.id.claimKey]
		switch {
		case k.found != nil:
			err = fmt.Errorf("oncekv: load mark: the key has a %s mark already: %w", stateName(k.found.state), fs.ErrExist)
		case !k.locked:
			err = errBusy
		}
		if err != nil {
			return requestError("load mark", o.req, err)
		}
		w.put(o, rows[i], nil)
	}
	if err := w.flush(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("oncekv: commit: %w", err)
	}
	return nil
}

// loadTime is the time whose window a loaded mark goes into.
func loadTime(m *oncekv.MarkInfo) time.Time {
	if m.Window.IsZero() {
		return m.FirstSeen
	}
	return m.Window
}

// RaiseCounter raises a token counter to at least last, never lowering
// it: resource's NextFence counter, or the claim tokens' sequence when
// resource is empty. It carries the counters of a store being moved here
// (`oncekv dump` writes them), so that a token issued after the move is
// greater than every one issued before it, which the external systems
// have seen.
//
// Errors: oncekv.ErrExhausted for a last over 2^63-1 (PostgreSQL's
// bigint), oncekv.ErrKeyTooLarge for a resource over 32768 bytes, ctx's
// error, oncekv.ErrClosed.
func (s *Store) RaiseCounter(ctx context.Context, resource string, last uint64) error {
	if !s.enter() {
		return oncekv.ErrClosed
	}
	defer s.exit()
	if last > math.MaxInt64 {
		return &resourceError{op: "raise counter", resource: resource, err: fmt.Errorf("%w: %d", oncekv.ErrExhausted, last)}
	}
	var err error
	if resource == "" {
		// setval of the greater of the two, with is_called: nextval then
		// returns last+1 at least.
		_, err = s.pool.Exec(ctx, `SELECT setval($1::regclass, greatest($2::bigint, (SELECT last_value FROM `+s.q.tokenSeq+`)), true)
			WHERE $2::bigint > 0`, s.q.tokenSeq, int64(last))
	} else {
		var id []byte
		if id, err = resourceID(resource); err == nil {
			_, err = s.pool.Exec(ctx, `INSERT INTO `+s.q.schema+`.fence_counters AS c (id, resource, last) VALUES ($1, $2, $3)
				ON CONFLICT (id) DO UPDATE SET last = greatest(c.last, excluded.last)`, id, []byte(resource), int64(last))
		}
	}
	if err != nil {
		return &resourceError{op: "raise counter", resource: resource, err: err}
	}
	return nil
}
