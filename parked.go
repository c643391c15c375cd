package oncekv

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// Parked keys: a PARKED mark lives in a window like any mark, so every
// look-up finds it, and an index (layout.ParkedRoot) names each one, so
// that expiry carries it to the newest window before its own expires and
// an operator can list them: a parked key never expires silently
// (docs/design/probe.md).

// loadParked reads, at Open, how many keys are parked.
func (db *DB) loadParked(tx *bolt.Tx) error {
	db.parkedKeys.Store(int64(layout.CountParked(tx)))
	return nil
}

// Parked calls fn with every parked key, in key order, until fn returns an
// error, which Parked returns: the keys waiting for an operator, each with
// the attempt in doubt (MarkInfo.Token, AttemptStarted, Takeovers) and
// when it was parked (ParkedAt). It reads the index and the parked marks
// only, in one read transaction; fn must not call other DB methods.
// Errors: ErrCorrupt (a *RecordError), ErrClosed.
func (db *DB) Parked(fn func(MarkInfo) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	return db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			return layout.ForEachParked(btx, func(mkey []byte, p layout.ParkedEntry) error {
				m, err := db.parkedMark(btx, mkey, p)
				if err != nil {
					return err
				}
				handler, key, _ := layout.SplitMarkKey(mkey)
				info := db.markInfo(handler, key, mkey, m)
				info.ParkedAt = timeFromNano(p.At)
				return callUser(func() error { return fn(info) })
			})
		})
	})
}

// parkedMark reads the PARKED mark the index entry p of mkey names; a
// missing or other mark is corruption.
func (db *DB) parkedMark(btx *bolt.Tx, mkey []byte, p layout.ParkedEntry) (*layout.FoundMark, error) {
	var m *layout.FoundMark
	var err error
	if b := btx.Bucket(layout.WindowName(p.Window)); b != nil {
		m, err = layout.GetMark(b, p.Window, mkey)
	}
	switch {
	case err != nil:
		return nil, err
	case m == nil || m.State != layout.Parked:
		handler, key, _ := layout.SplitMarkKey(mkey)
		return nil, &RecordError{Bucket: string(layout.ParkedRoot), Key: handler + "/" + key,
			Err: fmt.Errorf("the index names window %s, which holds no PARKED mark of the key", windowName(p.Window))}
	}
	return m, nil
}

// parkedAt sets info.ParkedAt from the index, for a PARKED mark.
func parkedAt(btx *bolt.Tx, mkey []byte, info *MarkInfo) error {
	if info.State != MarkParked {
		return nil
	}
	p, ok, err := layout.GetParked(btx, mkey)
	if ok {
		info.ParkedAt = timeFromNano(p.At)
	}
	return err
}

// ResolveParked settles a parked key, for an operator who found out what
// the attempt in doubt did (MarkInfo.Token and ClaimKey name it to the
// external system): applied records the key DONE with response, as the
// attempt's Complete would have, and every delivery from then on is a
// duplicate; not applied drops the key's mark, so that the next delivery
// claims or applies it afresh, with no probe.
//
// Errors, each in a *RequestError: ErrNotFound, ErrNotParked,
// ErrResponseTooLarge, the bad input errors of Apply, ErrReadOnly,
// ErrClosed.
func (db *DB) ResolveParked(handler, key string, applied bool, response []byte) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	req := Request{Handler: handler, Key: key}
	mkey, err := markKey(&req)
	resp := bytes.Clone(response)
	if err == nil && applied {
		err = db.checkResponse(len(resp))
	}
	if err == nil {
		err = db.updateMark(mkey, func(w *writeTx, m *layout.FoundMark) error {
			if m.State != layout.Parked {
				return fmt.Errorf("%w: it is %v", ErrNotParked, m.State)
			}
			if err := layout.DeleteParked(w.btx, mkey); err != nil {
				return err
			}
			if !applied {
				return w.deleteMark(m.Window, mkey)
			}
			mark := m.Mark
			mark.State, mark.Response, mark.AttemptStart = layout.Done, resp, 0
			_, err := w.rewriteMark(m.Window, mkey, &mark)
			return err
		})
	}
	if err != nil {
		return requestError("resolve parked", &req, err)
	}
	db.parkedKeys.Add(-1)
	db.log.Info("parked key resolved", "handler", handler, "key", key, "applied", applied)
	return nil
}

// carryParkedLocked moves every parked mark of a window starting before
// floor to the window a new mark goes into now, and its index entry with
// it, in w: expiry raises the floor past those windows next, and a parked
// key is kept until resolved.
func (w *writeTx) carryParkedLocked(floor int64) error {
	type entry struct {
		mkey []byte
		p    layout.ParkedEntry
	}
	var moving []entry
	err := layout.ForEachParked(w.btx, func(mkey []byte, p layout.ParkedEntry) error {
		if p.Window < floor {
			moving = append(moving, entry{bytes.Clone(mkey), p})
		}
		return nil
	})
	for i := 0; err == nil && i < len(moving); i++ {
		e := &moving[i]
		var m *layout.FoundMark
		if m, err = w.db.parkedMark(w.btx, e.mkey, e.p); err != nil {
			break
		}
		mark := m.Mark
		if e.p.Window, err = w.rewriteMark(m.Window, e.mkey, &mark); err == nil {
			err = layout.PutParked(w.btx, e.mkey, e.p)
		}
	}
	return err
}
