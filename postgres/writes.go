package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// writes are the marks one attempt writes, sent in one round trip before
// its commit.
type writes struct {
	s        *Store
	now, cur int64            // the attempt's time, and the start of its window
	written  map[string]*mark // by claim key, for duplicates within the batch
	inserts  []*mark
	ids      []*ident // of inserts
	rewrites []rewrite
	drops    []rewrite // marks deleted (Abandon); m is nil
}

// rewrite is a mark that replaces an older one of its key (a takeover).
type rewrite struct {
	id   *ident
	from int64 // the window of the row it replaces
	m    *mark
}

func newWrites(s *Store, now, cur int64) *writes {
	return &writes{s: s, now: now, cur: cur, written: make(map[string]*mark)}
}

// put queues o's mark m, which replaces old when old is not nil.
func (w *writes) put(o *op, m *mark, old *mark) {
	w.written[o.id.claimKey] = m
	if old == nil {
		w.inserts = append(w.inserts, m)
		w.ids = append(w.ids, &o.id)
		return
	}
	m.win = w.s.rewriteWindow(old.win, m, w.now, w.cur)
	w.rewrites = append(w.rewrites, rewrite{id: &o.id, from: old.win, m: m})
}

// rewriteWindow is the window of m, a mark that replaces one in the
// window from at now: from, unless from expires before m must live (a
// final mark Retention from now, a claim its lease), as the root's
// rewriteMark decides; then the current window cur.
func (s *Store) rewriteWindow(from int64, m *mark, now, cur int64) int64 {
	until := now + int64(s.opts.Retention)
	switch m.state {
	case stateInProgress:
		until = m.leaseUntil
	case stateParked:
		return cur // the newest window: expiry carries it on from there (expire.go)
	}
	if s.window.ExpiresAt(from) < until {
		return cur
	}
	return from
}

// flush sends the queued marks.
func (w *writes) flush(ctx context.Context, tx pgx.Tx) error {
	var b pgx.Batch
	if n := len(w.inserts); n > 0 {
		a := newMarkArrays(n)
		for i, m := range w.inserts {
			a.add(i, m, w.ids[i])
		}
		b.Queue(w.s.q.insert, a.args()...)
	}
	for _, r := range w.rewrites {
		b.Queue(w.s.q.rewrite, rewriteArgs(r.id, r.from, r.m)...)
	}
	for _, r := range w.drops {
		b.Queue(w.s.q.remove, r.id.id, r.from)
	}
	if b.Len() == 0 {
		return nil
	}
	res := tx.SendBatch(ctx, &b)
	defer res.Close()
	for i := range b.Len() {
		tag, err := res.Exec()
		if err != nil {
			if missingPartition(err) {
				w.s.windows.forget(w.cur)
			}
			return fmt.Errorf("oncekv: write marks: %w", err)
		}
		if want := w.want(i); tag.RowsAffected() != want {
			return fmt.Errorf("oncekv: write marks: %d rows written, want %d", tag.RowsAffected(), want)
		}
	}
	return res.Close()
}

// want is how many rows the i-th statement of flush's batch writes.
func (w *writes) want(i int) int64 {
	if len(w.inserts) > 0 {
		if i == 0 {
			return int64(len(w.inserts))
		}
	}
	return 1
}

// markArrays are the columns of many marks, as arrays for the insert
// statement's unnest.
type markArrays struct {
	win, firstSeen                   []int64
	lease, token, attempt, parked    []*int64
	takeovers                        []int32
	state                            []int16
	id, fp, handler, key, resp, errs [][]byte
}

func newMarkArrays(n int) *markArrays {
	return &markArrays{
		win: make([]int64, n), firstSeen: make([]int64, n), lease: make([]*int64, n), token: make([]*int64, n),
		state: make([]int16, n), id: make([][]byte, n), fp: make([][]byte, n), handler: make([][]byte, n),
		key: make([][]byte, n), resp: make([][]byte, n), errs: make([][]byte, n),
		attempt: make([]*int64, n), parked: make([]*int64, n), takeovers: make([]int32, n),
	}
}

func (a *markArrays) add(i int, m *mark, id *ident) {
	a.win[i], a.firstSeen[i], a.state[i] = m.win, m.firstSeen, m.state
	a.lease[i], a.token[i] = nullInt(m.leaseUntil, m.state == stateInProgress), nullInt(int64(m.token), m.token != 0)
	a.id[i], a.fp[i], a.handler[i], a.key[i] = id.id, m.fp, id.handler, id.key
	a.resp[i], a.errs[i] = m.response, nullBytes(m.errMsg)
	a.attempt[i], a.parked[i], a.takeovers[i] = nullInt(m.attemptStart, m.attemptStart != 0), nullInt(m.parkedAt, m.parkedAt != 0), m.takeovers
}

func (a *markArrays) args() []any {
	return []any{a.win, a.firstSeen, a.lease, a.token, a.state, a.id, a.fp, a.handler, a.key, a.resp, a.errs,
		a.attempt, a.takeovers, a.parked}
}

func rewriteArgs(id *ident, from int64, m *mark) []any {
	return []any{id.id, from, m.win, nullInt(m.leaseUntil, m.state == stateInProgress),
		nullInt(int64(m.token), m.token != 0), m.state, m.response, nullBytes(m.errMsg),
		nullInt(m.attemptStart, m.attemptStart != 0), m.takeovers, nullInt(m.parkedAt, m.parkedAt != 0)}
}

func nullInt(v int64, valid bool) *int64 {
	if !valid {
		return nil
	}
	return &v
}

func nullBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
