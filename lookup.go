package oncekv

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/markid"
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
)

// The values are the file's own (layout.State), so a mark's state converts
// as it is; an index out of range here fails the build if they drift.
var (
	_ = [1]struct{}{}[MarkInProgress-MarkState(layout.InProgress)]
	_ = [1]struct{}{}[MarkDone-MarkState(layout.Done)]
	_ = [1]struct{}{}[MarkFailed-MarkState(layout.Failed)]
)

// String returns IN_PROGRESS, DONE or FAILED.
func (s MarkState) String() string { return layout.State(s).String() }

// MarkInfo is what the store holds about one (handler, key), for support
// and tooling: answering "was this message processed, when, and with what
// answer" without reading the file by hand.
type MarkInfo struct {
	Handler, Key string
	State        MarkState
	// FirstSeen is when the key's first delivery wrote the mark.
	FirstSeen time.Time
	// Window is the start of the window holding the mark; the mark is
	// dropped with it, Options.Retention after its end.
	Window time.Time
	// Fingerprint is what a later request must match, or get ErrKeyReuse:
	// the first 16 bytes of the SHA-256 of the first Payload, or of the
	// Request.Fingerprint given instead (see Request); the last 16 bytes
	// are zero, as a mark stores only the first 16. LoadMarks accepts a
	// full SHA-256 here and keeps its first 16 bytes.
	Fingerprint [sha256.Size]byte
	// Response is the stored response of a DONE mark, a copy.
	Response []byte
	// Error is the stored message of a FAILED mark.
	Error string
	// LeaseUntil is when the claim's lease runs out, for an IN_PROGRESS
	// mark; zero otherwise, and for a claim that was released.
	LeaseUntil time.Time
	// Token is the fencing token of the claim that wrote the mark; 0 for
	// one Apply wrote from scratch.
	Token uint64
	// ClaimKey is what Claim.Key returns for this (handler, key): the
	// idempotency key the external system was given, to look its side up.
	ClaimKey string
	// Released is true for an IN_PROGRESS mark that any Claim or Apply may
	// take over at once: its holder released it (Claim.Fail with a
	// transient error, DB.ReleaseClaim) or is gone (Orphaned).
	Released bool
	// Orphaned is true for an IN_PROGRESS mark taken by a process that is
	// no longer running (see Options.KeepOrphanedClaims).
	Orphaned bool
}

// Mark returns what the store holds about (handler, key). It reads one
// snapshot, takes no write lock, and changes nothing, not even in a
// read-only store.
//
// Errors: ErrNotFound when the key has no mark (never seen, forgotten, or
// expired); the bad input errors of Apply; ErrCorrupt for a mark that does
// not decode; ErrClosed after Close. Each comes wrapped in a *RequestError.
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
			return nil
		})
	})
	return info, requestError("mark", &req, err)
}

// Claims calls fn with every IN_PROGRESS mark in the live windows, oldest
// window first, until fn returns an error, which Claims returns. It is for
// an operator looking for stuck work, and reads every live mark to find
// them: a tool, not a hot path. fn runs inside one read transaction, which
// holds bbolt's memory map while it runs (a long one delays a writer that
// must grow the file); it must not call other DB methods.
func (db *DB) Claims(fn func(MarkInfo) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	floor := db.windows.Floor()
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
// for an operator who knows its worker is gone: the same as the worker's
// own Claim.Fail with a transient error. token must be the claim's, as
// DB.Mark or DB.Claims showed it, so a claim taken over since is not
// released by mistake. If the worker is in fact alive and nobody has taken
// the key over, its Complete still succeeds; after a takeover it gets
// ErrFenced. Either way its external call may have happened: the external
// system deduplicates on Claim.Key.
//
// Errors: ErrNotFound when the key has no mark; ErrClaimDone when it is
// DONE or FAILED; ErrFenced (a *FenceError when the key holds a greater
// token) when token is not the holder's; ErrReadOnly; ErrClosed; the bad
// input errors of Apply. Each comes wrapped in a *RequestError.
func (db *DB) ReleaseClaim(handler, key string, token uint64) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	req := Request{Handler: handler, Key: key}
	mkey, err := markKey(&req)
	if err == nil {
		err = db.write(func(w *writeTx) error {
			m, err := db.findMark(w.btx, mkey)
			switch {
			case err != nil:
				return err
			case m == nil:
				return ErrNotFound
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

// markKey validates req's handler and key and returns its mark key.
func markKey(req *Request) ([]byte, error) {
	return markid.Key(req.Handler, req.Key)
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
