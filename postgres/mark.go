package postgres

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/markid"
)

// The states of a mark, as the root's records number them.
const (
	stateInProgress int16 = 1
	stateDone       int16 = 2
	stateFailed     int16 = 3
	stateParked     int16 = 4
	// stateGone is never stored: a claim's step that sets it deletes the
	// key's mark (Abandon).
	stateGone int16 = -1
)

// fingerprintSize is how much of the payload's SHA-256 a mark keeps, as
// in the root.
const fingerprintSize = 16

// releasedLease is the lease end of a released claim: run out whatever
// the clock says, as in the root.
const releasedLease = math.MinInt64

// ident is what identifies one request: its mark key's id (the row's id
// column), the advisory lock that serialises its writers, and the
// fingerprint its mark keeps.
type ident struct {
	handler, key []byte
	id           []byte // 16 bytes: see schemaDDL
	claimKey     string // Claim.Key
	lock         int64  // pg_advisory_xact_lock key
	fp           []byte // fingerprintSize bytes
}

// identify validates req as the root does (markid) and returns its
// identity within the store whose lock salt is salt.
func identify(req *oncekv.Request, salt int64) (ident, error) {
	mkey, err := markid.Key(req.Handler, req.Key)
	if err != nil {
		return ident{}, err
	}
	fp, err := markid.Fingerprint(req.Payload, req.Fingerprint)
	if err != nil {
		return ident{}, err
	}
	return identOf(mkey, req.Handler, req.Key, fp[:fingerprintSize], salt), nil
}

func identOf(mkey []byte, handler, key string, fp []byte, salt int64) ident {
	sum := sha256.Sum256(mkey)
	return ident{
		handler:  []byte(handler),
		key:      []byte(key),
		id:       sum[:16],
		claimKey: markid.ClaimKey(mkey),
		lock:     int64(binary.BigEndian.Uint64(sum[:8])) ^ salt,
		fp:       fp,
	}
}

// mark is one row of the marks table.
type mark struct {
	win        int64
	firstSeen  int64
	leaseUntil int64 // 0 when NULL
	token      uint64
	state      int16
	fp         []byte
	response   []byte // nil when NULL: nil and empty stay distinct
	errMsg     string
	// attemptStart is when the attempt an IN_PROGRESS or PARKED mark
	// records took the key; 0 (NULL) for the key's first attempt, whose
	// start is firstSeen.
	attemptStart int64
	takeovers    int32  // times the key was taken over from an attempt that recorded no outcome
	parkedAt     int64  // when a PARKED mark was parked; 0 (NULL) otherwise
	tomb         bool   // a tombstone: no fingerprint, response or error (see tombColumns)
	bad          string // what is wrong with the row it was read from; see checkMark
}

// markColumns are the columns scanMark reads, in its order.
const markColumns = "win, first_seen, lease_until, token, state, fingerprint, response, error, attempt_start, takeovers, parked_at"

// tombColumns are markColumns as a row of the tombstones table gives
// them: no lease, token, response, error or attempt, and a NULL
// fingerprint, which tells a tombstone from a mark.
const tombColumns = "win, first_seen, NULL::bigint, NULL::bigint, state, NULL::bytea, NULL::bytea, NULL::bytea, NULL::bigint, 0, NULL::bigint"

// scanner is a pgx.Row or pgx.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanMark reads the columns of markColumns (after those in extra). The
// row is not checked yet: see checkMark.
func scanMark(r scanner, extra ...any) (*mark, error) {
	var m mark
	var lease, token, attemptStart, parkedAt *int64
	var errMsg []byte
	dest := append(extra, &m.win, &m.firstSeen, &lease, &token, &m.state, &m.fp, &m.response, &errMsg,
		&attemptStart, &m.takeovers, &parkedAt)
	if err := r.Scan(dest...); err != nil {
		return nil, err
	}
	switch {
	case m.state < stateInProgress || m.state > stateParked:
		m.bad = fmt.Sprintf("state %d", m.state)
	case m.fp == nil && (m.state == stateDone || m.state == stateFailed):
		m.tomb = true
	case len(m.fp) != fingerprintSize:
		m.bad = fmt.Sprintf("fingerprint of %d bytes, want %d", len(m.fp), fingerprintSize)
	case m.state == stateInProgress && lease == nil:
		m.bad = "a claim without a lease end"
	case token != nil && *token < 0:
		m.bad = fmt.Sprintf("token %d", *token)
	case m.takeovers < 0:
		m.bad = fmt.Sprintf("%d takeovers", m.takeovers)
	case m.state == stateParked && parkedAt == nil:
		m.bad = "a parked mark without the time it was parked"
	}
	if attemptStart != nil {
		m.attemptStart = *attemptStart
	}
	if parkedAt != nil {
		m.parkedAt = *parkedAt
	}
	if lease != nil {
		m.leaseUntil = *lease
	}
	if token != nil {
		m.token = uint64(*token)
	}
	m.errMsg = string(errMsg)
	return &m, nil
}

// checkMark returns m, or a *oncekv.RecordError naming the table and id's
// key when m's row does not hold a mark: a bad row is an error, never a
// panic or a wrong answer.
func (s *Store) checkMark(m *mark, id *ident) (*mark, error) {
	if m.bad == "" {
		return m, nil
	}
	return nil, &oncekv.RecordError{Bucket: s.opts.Schema + ".marks", Key: string(id.handler) + "/" + string(id.key), Err: errors.New(m.bad)}
}

// sameRequest reports whether m's fingerprint is the request's.
func (m *mark) sameRequest(id *ident) bool { return bytes.Equal(m.fp, id.fp) }

// attempt is the attempt m records, of req's key (see oncekv.Attempt).
func (m *mark) attempt(req *oncekv.Request) oncekv.Attempt {
	started := m.attemptStart
	if started == 0 {
		started = m.firstSeen // the key's first attempt
	}
	return oncekv.Attempt{Handler: req.Handler, Key: req.Key, Token: m.token, Started: timeFromNano(started), Takeovers: int(m.takeovers)}
}

// live reports whether m is a claim whose lease has not run out at now.
func (m *mark) live(now int64) bool { return m.state == stateInProgress && now < m.leaseUntil }

func timeFromNano(n int64) time.Time { return time.Unix(0, n) }

// leaseEnd is now+lease in Unix nanoseconds, saturated rather than
// wrapped around, as the root's.
func leaseEnd(now int64, lease time.Duration) int64 {
	if now > 0 && int64(lease) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(lease)
}
