package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/markid"
)

// Parked keys: a PARKED mark (state 4) is a row of the marks table like
// any mark, so every look-up on every host finds it; the partial index
// marks_parked lists them, so that an operator sees each one and expiry
// moves each one to the newest window before its own partition is
// dropped (expire.go): a parked key never expires silently.

// Parked calls fn with every parked key of the schema, ordered by handler
// and then key, until fn returns an error, which Parked returns: the keys
// waiting for an operator, each with the attempt in doubt
// (oncekv.MarkInfo's Token, AttemptStarted, Takeovers), when it was
// parked (ParkedAt), and ClaimKey, the idempotency key to ask the
// external system about. It reads them in one query, by the parked
// index, before calling fn, which may call the Store (ResolveParked).
//
// Errors: oncekv.ErrCorrupt (an *oncekv.RecordError) for a row that does
// not hold a mark, ctx's error, oncekv.ErrClosed, the database's errors.
func (s *Store) Parked(ctx context.Context, fn func(oncekv.MarkInfo) error) error {
	if !s.enter() {
		return oncekv.ErrClosed
	}
	infos, err := s.parked(ctx)
	s.exit()
	if err != nil {
		return err
	}
	for _, info := range infos {
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// parked reads the parked marks.
func (s *Store) parked(ctx context.Context) ([]oncekv.MarkInfo, error) {
	rows, err := s.pool.Query(ctx, s.q.parked)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var infos []oncekv.MarkInfo
	for rows.Next() {
		var handler, key []byte
		m, err := scanMark(rows, &handler, &key)
		if err != nil {
			return nil, err
		}
		req := oncekv.Request{Handler: string(handler), Key: string(key)}
		mkey, err := markid.Key(req.Handler, req.Key)
		if err != nil {
			return nil, s.badRow(&req, err)
		}
		id := identOf(mkey, req.Handler, req.Key, nil, s.salt)
		if m, err = s.checkMark(m, &id); err != nil {
			return nil, err
		}
		info := oncekv.MarkInfo{
			Handler: req.Handler, Key: req.Key, State: oncekv.MarkParked,
			FirstSeen: timeFromNano(m.firstSeen), Window: timeFromNano(m.win),
			Token: m.token, AttemptStarted: m.attempt(&req).Started, Takeovers: int(m.takeovers),
			ParkedAt: timeFromNano(m.parkedAt), ClaimKey: id.claimKey,
		}
		copy(info.Fingerprint[:], m.fp)
		infos = append(infos, info)
	}
	return infos, rows.Err()
}

// badRow is the *oncekv.RecordError of a marks row of req's key that
// does not hold a mark.
func (s *Store) badRow(req *oncekv.Request, err error) error {
	return &oncekv.RecordError{Bucket: s.opts.Schema + ".marks", Key: req.Handler + "/" + req.Key, Err: err}
}

// ResolveParked settles a parked key, for an operator who found out what
// the attempt in doubt did (oncekv.MarkInfo's Token and ClaimKey, from
// Parked, name it to the external system), as oncekv.DB.ResolveParked
// does: applied records the key DONE with response, as the attempt's
// Complete would have, and every delivery from then on, on every host, is
// a duplicate; not applied drops the key's mark, so that the next
// delivery claims or applies it afresh, with no probe. It waits for the
// key's lock, as a claim's Complete does.
//
// Errors, each in an *oncekv.RequestError: oncekv.ErrNotFound,
// oncekv.ErrNotParked, oncekv.ErrResponseTooLarge, the bad input errors
// of Apply, ctx's error, oncekv.ErrClosed, the database's errors.
func (s *Store) ResolveParked(ctx context.Context, handler, key string, applied bool, response []byte) error {
	if !s.enter() {
		return oncekv.ErrClosed
	}
	defer s.exit()
	req := oncekv.Request{Handler: handler, Key: key}
	id, err := identify(&req, s.salt)
	resp := cloneNil(response)
	if err == nil && applied {
		err = s.checkResponse(len(resp))
	}
	if err == nil {
		err = s.resolve(ctx, &req, id, applied, resp)
	}
	if err != nil {
		return requestError("resolve parked", &req, err)
	}
	s.log.Info("parked key resolved", "handler", handler, "key", key, "applied", applied)
	return nil
}

// resolve is ResolveParked's transaction.
func (s *Store) resolve(ctx context.Context, req *oncekv.Request, id ident, applied bool, resp []byte) error {
	tx, w, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", id.lock); err != nil {
		return err
	}
	o := &op{req: req, id: id}
	found, err := s.lookup(ctx, tx, []*op{o})
	if err != nil {
		return err
	}
	m := found[0]
	switch {
	case m == nil:
		return oncekv.ErrNotFound
	case m.state != stateParked:
		return fmt.Errorf("%w: it is %s", oncekv.ErrNotParked, stateName(m.state))
	case !applied:
		if err := removeMark(ctx, tx, s.q.remove, &id, m.win); err != nil {
			return err
		}
	default:
		next := *m
		next.state, next.response, next.attemptStart, next.parkedAt = stateDone, resp, 0, 0
		w.put(o, &next, m)
	}
	return s.commit(ctx, tx, w)
}

// carryParked moves the PARKED marks of the partition p, about to be
// expired, to the window starting at cur, in one transaction on conn
// under their keys' locks (waiting for them, within Options.LockTimeout):
// a parked key is kept until resolved.
func (s *Store) carryParked(ctx context.Context, conn *pgxpool.Conn, p *partition, cur int64) error {
	rows, err := conn.Query(ctx, "SELECT id FROM ONLY "+p.table+" WHERE state = 4")
	if err != nil {
		return err
	}
	locks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
		var id []byte
		if err := r.Scan(&id); err != nil {
			return 0, err
		}
		if len(id) < 8 {
			return 0, fmt.Errorf("oncekv: a parked mark of %s has an id of %d bytes", p.table, len(id))
		}
		return int64(binary.BigEndian.Uint64(id[:8])) ^ s.salt, nil // as identOf
	})
	if err != nil || len(locks) == 0 {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(l) FROM unnest($1::bigint[]) AS l", locks); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE "+s.q.marks+" SET win = $1 WHERE win = $2 AND state = 4", cur, p.start)
		if err == nil {
			s.log.Info("parked marks carried to the newest window", "schema", s.opts.Schema, "from", timeFromNano(p.start).UTC(), "marks", len(locks))
		}
		return err
	})
}

// removeMark deletes the mark of id in the window win.
func removeMark(ctx context.Context, tx pgx.Tx, stmt string, id *ident, win int64) error {
	tag, err := tx.Exec(ctx, stmt, id.id, win)
	switch {
	case err != nil:
		return fmt.Errorf("oncekv: remove mark: %w", err)
	case tag.RowsAffected() != 1:
		return errors.New("oncekv: remove mark: the row is gone")
	}
	return nil
}
