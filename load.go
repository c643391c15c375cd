package oncekv

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/oncekv/oncekv/internal/layout"
)

// LoadMarks writes marks, as DB.Marks listed them from another store (a
// dump), into this one in one write transaction: for moving a store to
// another machine. Each mark keeps its state, fingerprint, response or
// error, token and FirstSeen. It goes into this store's window of its
// Window (of its FirstSeen when Window is zero), so it expires no sooner
// than it did in the other store, or into the newest window when that is
// later (a window never gains a key once a newer one exists, including a
// newer one this same call created): load marks oldest window first, as
// Marks lists them, or later ones go into a later window than their own.
// A mark that has expired by this store's clock and Retention is skipped:
// loaded reports how many marks were written.
//
// Only DONE and FAILED marks are loaded. A claim in progress is refused
// with ErrInProgress: its worker belongs to the other store, and a claim
// taken here would get a token from this store's counter, possibly smaller
// than the one the external system saw, which would then fence it off.
//
// Errors, each wrapped in a *RequestError naming the handler and key, and
// nothing is written when one is returned: an error matching fs.ErrExist
// when the key has a mark here already (or is given twice); ErrInProgress;
// ErrInvalidMark for a State that is none of the MarkState values;
// ErrResponseTooLarge; the bad input errors of Apply; ErrReadOnly;
// ErrClosed.
func (db *DB) LoadMarks(marks []MarkInfo) (loaded int, err error) {
	if !db.life.enter() {
		return 0, ErrClosed
	}
	defer db.life.exit()
	err = db.write(func(w *writeTx) error {
		loaded = 0
		now := db.clock.read().UnixNano()
		for i := range marks {
			if db.window.ExpiresAt(db.window.Start(loadTime(&marks[i]))) <= now {
				continue
			}
			if err := db.loadMarkLocked(w, &marks[i]); err != nil {
				return requestError("load mark", &Request{Handler: marks[i].Handler, Key: marks[i].Key}, err)
			}
			loaded++
		}
		return nil
	})
	if err != nil {
		loaded = 0
	}
	return loaded, err
}

// ErrInvalidMark: LoadMarks was given a mark whose state is not one of the
// MarkState values. Nothing was written.
var ErrInvalidMark = errors.New("oncekv: invalid mark")

// loadMarkLocked writes one mark of LoadMarks, in w.
func (db *DB) loadMarkLocked(w *writeTx, info *MarkInfo) error {
	mkey, err := markKey(&Request{Handler: info.Handler, Key: info.Key})
	if err != nil {
		return err
	}
	switch info.State {
	case MarkDone, MarkFailed:
	case MarkInProgress:
		return fmt.Errorf("%w: a claim in progress is not loaded", ErrInProgress)
	default:
		return fmt.Errorf("oncekv: load mark: unknown state %d: %w", info.State, ErrInvalidMark)
	}
	if w.wrote(mkey) {
		return fmt.Errorf("oncekv: load mark: the key is loaded twice: %w", fs.ErrExist)
	}
	if m, err := db.findMark(w.btx, mkey); err != nil || m != nil {
		if err == nil {
			err = fmt.Errorf("oncekv: load mark: the key has a %v mark already: %w", m.State, fs.ErrExist)
		}
		return err
	}
	m := &layout.Mark{
		State:       layout.State(info.State),
		PayloadHash: info.Fingerprint,
		Response:    info.Response,
		Error:       info.Error,
		Token:       info.Token,
		FirstSeen:   info.FirstSeen.UnixNano(),
	}
	if size := len(m.Response) + len(m.Error); size > MaxResponseSize {
		return fmt.Errorf("%w: %d bytes, over %d", ErrResponseTooLarge, size, MaxResponseSize)
	}
	return w.putMark(db.placeMark(loadTime(info)), mkey, m)
}

// loadTime is the time whose window a loaded mark goes into.
func loadTime(info *MarkInfo) time.Time {
	if info.Window.IsZero() {
		return info.FirstSeen
	}
	return info.Window
}
