package oncekv

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/oncekv/oncekv/internal/layout"
)

// Mark records req in the open write transaction exactly as Apply would
// record it, with response as the stored response, and returns the result
// Apply would return, so an effect (or any Update) can deduplicate work of
// its own: an outbox message, a second handler's key.
//
// If (req.Handler, req.Key) already has a DONE mark within the dedup
// window, Mark writes nothing and returns its stored response with
// Duplicate set (the caller should then skip the work), or ErrKeyReuse
// when the mark was made with another payload; a FAILED mark returns its
// *FailedError and a live claim ErrInProgress. Otherwise it writes a DONE
// mark, in the window of the transaction's time (Tx.Now), which commits or
// rolls back with the rest of the transaction. The same windows, expiry
// and Bloom filters serve Mark and Apply: a key marked here is a duplicate
// for Apply and the reverse, and a second Mark of the key in the same
// transaction is a duplicate too. The filters learn the key only once the
// transaction has committed.
//
// Errors, wrapped in a *RequestError naming the handler and key:
// ErrTxNotWritable in a read-only transaction, ErrTxClosed after it ended,
// ErrHandlerRequired, ErrKeyRequired, ErrKeyTooLarge, ErrMarkOwnKey,
// ErrResponseTooLarge for a response larger than a mark can hold (as
// Apply), and the answers above. An error writes nothing.
func (tx *Tx) Mark(req Request, response []byte) (Result, error) {
	res, kind, err := tx.mark(&req, response)
	if w := tx.w; w != nil && kind != outcomeNone {
		// Counted when (if) the transaction commits: a rolled-back group
		// attempt runs its effects again.
		handler, stats := req.Handler, &w.db.stats
		w.onCommit(func() { stats.count(handler, kind) })
	}
	return res, requestError("mark", &req, err)
}

// LookupMark answers as Mark would, without writing: found reports that
// (req.Handler, req.Key) has a mark that decides it (res is then Mark's
// answer, err its error: ErrKeyReuse, a *FailedError or ErrInProgress), and
// false means Mark would write a new mark. A caller checks first, and
// writes only once it knows it has room, for example.
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
	o, err := w.db.newOp(nil, req, nil)
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
		// Refused as Apply refuses it, before anything is written: the
		// transaction is the caller's, and may commit without this mark.
		return Result{}, outcomeInvalid, err
	}
	resp := bytes.Clone(response)
	mark := layout.Mark{State: layout.Done, PayloadHash: o.hash, Response: resp, FirstSeen: w.now.UnixNano()}
	if found != nil {
		// An expired claim is taken over as Apply does: it keeps its
		// first-seen time, and rewriteMark moves it out of its window when
		// that would expire before Retention from now, the least a mark
		// written now is deduplicated for.
		// The mark takes a token greater than the claim's, so the
		// holder's late Complete gets a *FenceError with both.
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
