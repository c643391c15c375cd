package oncekv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// MarkState is the state of a key's mark.
type MarkState uint8

// The states of a mark, with the names of the article's processed_messages
// table.
const (
	// MarkInProgress: a claim holds the key (see DB.Claim).
	MarkInProgress MarkState = 1
	// MarkDone: the effect committed; duplicates get the stored response.
	MarkDone MarkState = 2
	// MarkFailed: the effect failed permanently; duplicates get the error.
	MarkFailed MarkState = 3
	// MarkParked: a takeover's probe could not tell whether an earlier
	// attempt applied its effect; every request gets ErrParked until an
	// operator resolves it (DB.ResolveParked).
	MarkParked MarkState = 4
)

// The values are layout.State's: an index out of range fails the build if
// they drift.
var (
	_ = [1]struct{}{}[MarkInProgress-MarkState(layout.InProgress)]
	_ = [1]struct{}{}[MarkDone-MarkState(layout.Done)]
	_ = [1]struct{}{}[MarkFailed-MarkState(layout.Failed)]
	_ = [1]struct{}{}[MarkParked-MarkState(layout.Parked)]
)

// String returns IN_PROGRESS, DONE, FAILED or PARKED.
func (s MarkState) String() string { return layout.State(s).String() }

// MarkInfo is what the store holds about one (handler, key): was it
// processed, when, and with what answer.
type MarkInfo struct {
	Handler, Key string
	State        MarkState
	// FirstSeen is when the key's first delivery wrote the mark.
	FirstSeen time.Time
	// Window is the start of the window holding the mark, dropped with it.
	Window time.Time
	// Fingerprint is what a later request must match: the first 16 bytes
	// of the SHA-256 of the first Payload (or Request.Fingerprint), the
	// rest zero. LoadMarks keeps the first 16 bytes of a full SHA-256.
	Fingerprint [sha256.Size]byte
	// Response is the stored response of a DONE mark, a copy.
	Response []byte
	// Error is the stored message of a FAILED mark.
	Error string
	// LeaseUntil is when an IN_PROGRESS mark's lease runs out; zero
	// otherwise, and for a released claim.
	LeaseUntil time.Time
	// Token is the fencing token of the claim that wrote the mark; 0 for a
	// mark Apply wrote from scratch. A PARKED mark's is the attempt in
	// doubt's.
	Token uint64
	// AttemptStarted is when the attempt an IN_PROGRESS or PARKED mark
	// records took the key (FirstSeen for the key's first attempt); zero
	// for the other states.
	AttemptStarted time.Time
	// Takeovers is how many times the key was taken over from an attempt
	// that recorded no outcome.
	Takeovers int
	// ParkedAt is when a PARKED mark was parked; zero otherwise.
	ParkedAt time.Time
	// Tombstone: what is left of a DONE or FAILED mark after Retention
	// (Options.TombstoneRetention): its state, FirstSeen to the minute and
	// Window; no fingerprint, response, error or token.
	Tombstone bool
	// ClaimKey is Claim.Key of this (handler, key).
	ClaimKey string
	// Released: an IN_PROGRESS mark any Claim or Apply may take over at once
	// (released by Claim.Fail or DB.ReleaseClaim, or Orphaned).
	Released bool
	// Orphaned: an IN_PROGRESS mark of a process no longer running.
	Orphaned bool
}

// Mark returns what the store holds about (handler, key), from one
// snapshot, changing nothing. Errors, each in a *RequestError: ErrNotFound
// (never seen, forgotten, or expired), the bad input errors of Apply,
// ErrCorrupt, ErrClosed.
func (db *DB) Mark(handler, key string) (MarkInfo, error) {
	if !db.life.enter() {
		return MarkInfo{}, ErrClosed
	}
	defer db.life.exit()
	req := Request{Handler: handler, Key: key}
	mkey, err := markKey(&req)
	if err != nil {
		return MarkInfo{}, requestError("mark", &req, err)
	}
	var info MarkInfo
	err = db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			m, err := db.findMark(btx, mkey)
			switch {
			case err != nil:
				return err
			case m == nil:
				return ErrNotFound
			}
			info = db.markInfo(handler, key, mkey, m)
			return parkedAt(btx, mkey, &info)
		})
	})
	return info, requestError("mark", &req, err)
}

// Claims calls fn with every IN_PROGRESS mark in the live windows, oldest
// window first, until fn returns an error, which Claims returns: a tool for
// finding stuck work, reading every live mark. fn runs inside one read
// transaction and must not call other DB methods.
func (db *DB) Claims(fn func(MarkInfo) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	floor := db.live.Floor()
	return db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			return layout.ForEachWindow(btx, false, func(start int64, w *bolt.Bucket) error {
				if start < floor {
					return nil // expired, being deleted
				}
				return w.ForEach(func(mkey, _ []byte) error {
					m, err := layout.GetMark(w, start, mkey)
					if err != nil || m.State != layout.InProgress {
						return err
					}
					handler, key, ok := layout.SplitMarkKey(mkey)
					if !ok {
						return &RecordError{Bucket: fmt.Sprintf("window %v", time.Unix(0, start).UTC()), Key: fmt.Sprintf("%x", mkey), Err: errors.New("malformed mark key")}
					}
					info := db.markInfo(handler, key, mkey, db.releaseOrphan(m))
					return callUser(func() error { return fn(info) })
				})
			})
		})
	})
}

// ReleaseClaim lets any Claim or Apply take over the key's claim at once,
// as the holder's Claim.Fail with a transient error would, for an operator
// who knows the worker is gone. token must be the claim's (DB.Mark,
// DB.Claims show it). A live worker's Complete still succeeds unless the
// key was taken over since.
//
// Errors, each in a *RequestError: ErrNotFound, ErrClaimDone for a DONE or
// FAILED key, ErrFenced (a *FenceError for a greater token) when token is
// not the holder's, ErrReadOnly, ErrClosed, the bad input errors of Apply.
func (db *DB) ReleaseClaim(handler, key string, token uint64) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	req := Request{Handler: handler, Key: key}
	mkey, err := markKey(&req)
	if err == nil {
		err = db.updateMark(mkey, func(w *writeTx, m *layout.FoundMark) error {
			switch {
			case m.State != layout.InProgress:
				return fmt.Errorf("%w: the key is %v", ErrClaimDone, m.State)
			case m.Token > token:
				return &FenceError{Stored: m.Token, Presented: token}
			case m.Token != token:
				return fmt.Errorf("%w: the claim's token is %d, not %d", ErrFenced, m.Token, token)
			}
			mark := m.Mark
			mark.LeaseUntil = releasedLease
			return w.putMark(m.Window, mkey, &mark)
		})
	}
	return requestError("release claim", &req, err)
}

// updateMark runs fn on mkey's mark in a write transaction, for an
// operator's call; a key without a mark is ErrNotFound.
func (db *DB) updateMark(mkey []byte, fn func(w *writeTx, m *layout.FoundMark) error) error {
	return db.write(func(w *writeTx) error {
		m, err := db.findMark(w.btx, mkey)
		switch {
		case err != nil:
			return err
		case m == nil:
			return ErrNotFound
		}
		return fn(w, m)
	})
}

func (db *DB) markInfo(handler, key string, mkey []byte, m *layout.FoundMark) MarkInfo {
	info := MarkInfo{
		Handler:     handler,
		Key:         key,
		State:       MarkState(m.State),
		FirstSeen:   timeFromNano(m.FirstSeen),
		Window:      timeFromNano(m.Window),
		Fingerprint: m.PayloadHash,
		Response:    m.Response, // decoded into fresh memory: the caller's
		Error:       m.Error,
		Token:       m.Token,
		ClaimKey:    claimKey(mkey),
		Orphaned:    db.isOrphan(m),
		Takeovers:   int(m.Takeovers),
		Tombstone:   m.Tombstone,
	}
	if m.State == layout.InProgress || m.State == layout.Parked {
		info.AttemptStarted = attemptOf(&Request{}, &m.Mark).Started
	}
	if m.State == layout.InProgress {
		if m.LeaseUntil == releasedLease {
			info.Released = true
		} else {
			info.LeaseUntil = timeFromNano(m.LeaseUntil)
		}
	}
	return info
}

// MarkFilter selects the marks DB.Marks lists; a zero field selects all.
type MarkFilter struct {
	// Handler keeps this handler's marks only, reading only its keys.
	Handler string
	// State, when set, keeps the marks in this state only.
	State MarkState
	// Window, when set, keeps the marks of the window starting at this
	// instant only (MarkInfo.Window, WindowStats.Start).
	Window time.Time
}

// Marks calls fn with every mark in the live windows that filter selects,
// oldest window first and in key order within one, until fn returns an
// error, which Marks returns. fn runs inside one read transaction and must
// not call other DB methods. Errors: ErrKeyTooLarge for a Handler no mark
// key could hold, ErrCorrupt (a *RecordError), ErrClosed.
func (db *DB) Marks(filter MarkFilter, fn func(MarkInfo) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	var prefix []byte
	if filter.Handler != "" {
		if err := layout.CheckMarkKey(filter.Handler, ""); err != nil {
			return fmt.Errorf("oncekv: marks: %w", err)
		}
		prefix = layout.MarkKey(filter.Handler, "")
	}
	floor := db.live.Floor()
	return db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			return layout.ForEachWindow(btx, false, func(start int64, w *bolt.Bucket) error {
				if start < floor || (!filter.Window.IsZero() && start != filter.Window.UnixNano()) {
					return nil // expired (being deleted), or not asked for
				}
				return db.windowMarks(w, start, prefix, filter.State, fn)
			})
		})
	})
}

// windowMarks calls fn with the marks of window w whose key begins with
// prefix and whose state is state (any state when 0).
func (db *DB) windowMarks(w *bolt.Bucket, start int64, prefix []byte, state MarkState, fn func(MarkInfo) error) error {
	c := w.Cursor()
	k, _ := c.First()
	if prefix != nil {
		k, _ = c.Seek(prefix)
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		m, err := layout.GetMark(w, start, k)
		if err != nil {
			return err
		}
		if state != 0 && MarkState(m.State) != state {
			continue
		}
		handler, key, ok := layout.SplitMarkKey(k)
		if !ok {
			return &RecordError{Bucket: fmt.Sprintf("window %v", time.Unix(0, start).UTC()), Key: fmt.Sprintf("%x", k), Err: errors.New("malformed mark key")}
		}
		info := db.markInfo(handler, key, k, db.releaseOrphan(m))
		if err := parkedAt(w.Tx(), k, &info); err != nil {
			return err
		}
		if err := callUser(func() error { return fn(info) }); err != nil {
			return err
		}
	}
	return nil
}

// LoadMarks writes marks, as DB.Marks listed them from another store, in
// one write transaction, each keeping its state, fingerprint, response or
// error, token and FirstSeen. A mark goes into the window of its Window (or
// FirstSeen), or the newest window when that is later: load marks oldest
// window first, as Marks lists them. Marks expired here are skipped; loaded
// counts those written. IN_PROGRESS marks are refused (docs/design/claims.md).
//
// Errors, each in a *RequestError, and then nothing is written: one
// matching fs.ErrExist for a key with a mark here (or given twice),
// ErrInProgress, ErrInvalidMark, ErrResponseTooLarge, the bad input errors
// of Apply, ErrReadOnly, ErrClosed.
func (db *DB) LoadMarks(marks []MarkInfo) (loaded int, err error) {
	if !db.life.enter() {
		return 0, ErrClosed
	}
	defer db.life.exit()
	err = db.write(func(w *writeTx) error {
		loaded = 0
		now := db.clock.read().UnixNano()
		for i := range marks {
			if marks[i].State != MarkParked && db.windowConfig.ExpiresAt(db.windowConfig.Start(loadTime(&marks[i]))) <= now {
				continue // a parked key never expires: expiry carries it on
			}
			if err := db.loadMarkLocked(w, &marks[i]); err != nil {
				return requestError("load mark", &Request{Handler: marks[i].Handler, Key: marks[i].Key}, err)
			}
			loaded++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i := range marks {
		if marks[i].State == MarkParked {
			db.parkedKeys.Add(1)
		}
	}
	return loaded, nil
}

// loadMarkLocked writes one mark of LoadMarks, in w.
func (db *DB) loadMarkLocked(w *writeTx, info *MarkInfo) error {
	mkey, err := markKey(&Request{Handler: info.Handler, Key: info.Key})
	if err != nil {
		return err
	}
	switch info.State {
	case MarkDone, MarkFailed, MarkParked:
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
		Takeovers:   uint64(max(info.Takeovers, 0)),
	}
	if size := len(m.Response) + len(m.Error); size > MaxResponseSize {
		return fmt.Errorf("%w: %d bytes, over %d", ErrResponseTooLarge, size, MaxResponseSize)
	}
	window := db.placeMark(loadTime(info))
	if info.State != MarkParked {
		return w.putMark(window, mkey, m)
	}
	if n := layout.CountParked(w.btx); n >= uint64(max(db.opts.MaxParked, 0)) {
		return fmt.Errorf("%w (%d, Options.MaxParked)", ErrParkFull, n)
	}
	if started := info.AttemptStarted.UnixNano(); !info.AttemptStarted.IsZero() && started != m.FirstSeen {
		m.AttemptStart = started
	}
	at := info.ParkedAt
	if at.IsZero() {
		at = w.now
	}
	if err := w.putMark(window, mkey, m); err != nil {
		return err
	}
	return layout.PutParked(w.btx, mkey, layout.ParkedEntry{Window: window, At: at.UnixNano()})
}

// loadTime is the time whose window a loaded mark goes into.
func loadTime(info *MarkInfo) time.Time {
	if info.Window.IsZero() {
		return info.FirstSeen
	}
	return info.Window
}

// Forget drops the mark of (handler, key), so the next delivery is applied
// again; a key without a mark is no error. A live claim's key returns
// ErrInProgress (an *InProgressError) and stays; a parked key returns
// ErrParked (resolve it with ResolveParked).
func (db *DB) Forget(handler, key string) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	req := Request{Handler: handler, Key: key}
	o, err := db.newOp(context.Background(), &req, nil)
	if err != nil {
		return requestError("forget", &req, err)
	}
	tomb := int64(math.MinInt64)
	err = db.write(func(w *writeTx) error {
		tomb = math.MinInt64
		m, err := db.findMark(w.btx, o.mkey)
		if err != nil || m == nil {
			return err
		}
		if m.Tombstone {
			if deleted, err := w.deleteTomb(m.Window, o.mkey); err != nil || !deleted {
				return err
			}
			tomb = m.Window
			return nil
		}
		switch {
		case m.State == layout.InProgress && w.now.UnixNano() < m.LeaseUntil:
			return &InProgressError{until: timeFromNano(m.LeaseUntil)}
		case m.State == layout.Parked:
			return &ParkedError{Attempt: attemptOf(&req, &m.Mark)}
		}
		return w.deleteMark(m.Window, o.mkey)
	})
	if err != nil {
		return requestError("forget", &req, err)
	}
	if tomb != math.MinInt64 {
		db.tombForgotten(tomb)
	}
	return nil
}
