package oncekv

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/oncekv/oncekv/internal/layout"
)

// Mark records req in the open write transaction as Apply would, with
// response as the stored response, and returns Apply's result, so that an
// effect (or an Update) can deduplicate work of its own: an outbox message,
// a second handler's key. A key with a DONE mark writes nothing and
// returns its response with Duplicate set; ErrKeyReuse, a *FailedError or
// ErrInProgress answer as for Apply. Otherwise it writes a DONE mark that
// commits or rolls back with the transaction. A key marked here is a
// duplicate for Apply, and the reverse.
//
// Errors, each in a *RequestError, and then nothing is written:
// ErrTxNotWritable, ErrTxClosed, ErrMarkOwnKey, ErrResponseTooLarge, the
// bad input errors of Apply, and the answers above.
func (tx *Tx) Mark(req Request, response []byte) (Result, error) {
	res, kind, err := tx.mark(&req, response)
	if w := tx.w; w != nil && kind != outcomeNone {
		// Counted if the transaction commits: a rolled-back attempt runs again.
		handler, stats := req.Handler, &w.db.stats
		w.onCommit(func() { stats.count(handler, kind) })
	}
	return res, requestError("mark", &req, err)
}

// LookupMark answers as Mark would, without writing: found reports that the
// key has a mark deciding it (res and err are then Mark's answer), false
// that Mark would write a new one.
func (tx *Tx) LookupMark(req Request) (res Result, found bool, err error) {
	o, m, err := tx.lookup(&req)
	if err != nil {
		return Result{}, false, requestError("mark", &req, err)
	}
	if m == nil || !o.answer(m, tx.w.now) {
		return Result{}, false, nil
	}
	return o.res, true, requestError("mark", &req, o.err)
}

// lookup validates req and finds its mark in the open write transaction.
func (tx *Tx) lookup(req *Request) (*op, *layout.FoundMark, error) {
	if err := tx.checkWrite(); err != nil {
		return nil, nil, err
	}
	w := tx.w
	o, err := w.db.newOp(context.Background(), req, nil)
	if err != nil {
		return nil, nil, err
	}
	if w.owner != nil && bytes.Equal(w.owner.mkey, o.mkey) {
		return nil, nil, ErrMarkOwnKey
	}
	m, err := w.db.findMark(w.btx, o.mkey)
	if err != nil {
		return nil, nil, err
	}
	return o, m, nil
}

func (tx *Tx) mark(req *Request, response []byte) (Result, outcome, error) {
	o, found, err := tx.lookup(req)
	switch {
	case errors.Is(err, ErrTxClosed), errors.Is(err, ErrTxNotWritable):
		return Result{}, outcomeNone, err
	case err != nil && !errors.Is(err, ErrCorrupt): // bad input
		return Result{}, outcomeInvalid, err
	case err != nil:
		return Result{}, outcomeAborted, err
	}
	w := tx.w
	if found != nil && o.answer(found, w.now) {
		return o.res, o.kind, o.err
	}
	if err := w.db.checkResponse(len(response)); err != nil {
		// Refused before anything is written: the transaction may commit
		// without this mark.
		return Result{}, outcomeInvalid, err
	}
	resp := bytes.Clone(response)
	mark := layout.Mark{State: layout.Done, PayloadHash: o.hash, Response: resp, FirstSeen: w.now.UnixNano()}
	if found != nil {
		// An expired claim is taken over as Apply does (see decideOne).
		mark.FirstSeen = found.FirstSeen
		if mark.Token, err = layout.NextClaimToken(w.btx); err == nil {
			_, err = w.rewriteMark(found.Window, o.mkey, &mark)
		}
	} else {
		err = w.putMark(w.db.placeMark(w.now), o.mkey, &mark)
	}
	if err != nil {
		return Result{}, outcomeAborted, fmt.Errorf("oncekv: write mark: %w", err)
	}
	return Result{Response: bytes.Clone(resp), FirstSeen: timeFromNano(mark.FirstSeen)}, outcomeApplied, nil
}
