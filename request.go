package oncekv

import (
	"crypto/sha256"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// Request is one delivery of a logical operation.
type Request struct {
	// Handler names the operation or consumer. Dedup is scoped to
	// (Handler, Key): one event id may legitimately be processed by several
	// handlers. Required.
	Handler string
	// Key is the idempotency key: created once by the caller when the
	// intent was formed, and reused by every retry. Required. Handler and
	// Key together must fit in 32766 bytes.
	Key string
	// Payload is the operation's content. The first 16 bytes of its
	// SHA-256 are stored with the mark, and a later request with the same
	// key and another payload is rejected with ErrKeyReuse.
	Payload []byte
	// Fingerprint, when not empty, is what identifies the operation's
	// content instead of the Payload's bytes: its hash is stored in place
	// of the Payload's, and a later request of the key is a duplicate when
	// its Fingerprint is the same, whatever its Payload, and key reuse
	// when it differs. Give one when the same content can arrive as other
	// bytes: a producer that re-encodes JSON with its fields in another
	// order, or a payload with a timestamp of the send. It is typically a
	// hash of the fields that matter, or of a canonical encoding. Every
	// delivery of a key must then carry one: a request without it is
	// compared by its Payload's hash, which never equals a Fingerprint's.
	// At most MaxFingerprintSize bytes (ErrInvalidFingerprint).
	Fingerprint []byte
}

// Result is the outcome of an applied or deduplicated request.
type Result struct {
	// Response is what the effect returned when it first ran; every
	// duplicate gets the same bytes back. nil and empty stay distinct. It
	// is the caller's to keep and modify.
	Response []byte
	// Duplicate is true when the key had been applied before and the effect
	// did not run this time.
	Duplicate bool
	// FirstSeen is when the mark was first written.
	FirstSeen time.Time
}

// BatchResult is the outcome of one request of ApplyBatch.
type BatchResult struct {
	Result
	Err error // this request's error, as Apply would have returned it
}

// MaxResponseSize is the largest response a mark can hold, with the message
// of a permanent error counted in: bbolt's value limit, less room for the
// rest of the mark. A larger one fails its request with ErrResponseTooLarge.
const MaxResponseSize = bolt.MaxValueSize - markOverhead

// markOverhead bounds what a mark's record takes besides its response and
// error message: the record header and checksum, the state, the payload
// hash, three integers and the msgpack headers (under 100 bytes today).
const markOverhead = 1 << 10

// checkResponse returns ErrResponseTooLarge, naming both sizes, when n
// bytes of response (and error message) do not fit in a mark. It is
// checked before a mark is written, so the one request fails instead of
// the bbolt transaction that every request of its commit shares.
func (db *DB) checkResponse(n int) error {
	if n > db.maxResponse {
		return fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrResponseTooLarge, n, db.maxResponse)
	}
	return nil
}

// markKey validates req's handler and key and returns its mark key.
func markKey(req *Request) ([]byte, error) {
	switch {
	case req.Handler == "":
		return nil, ErrHandlerRequired
	case req.Key == "":
		return nil, ErrKeyRequired
	}
	if err := layout.CheckMarkKey(req.Handler, req.Key); err != nil {
		return nil, err
	}
	return layout.MarkKey(req.Handler, req.Key), nil
}

// MaxFingerprintSize is the longest Request.Fingerprint: room for a SHA-512
// or a version string, and short enough to catch a payload passed where
// its fingerprint was meant.
const MaxFingerprintSize = 64

// fingerprintDomain keeps a caller's fingerprint apart from payload
// hashes: hashed with it, a Fingerprint never stores the same value as
// the SHA-256 of some Payload.
const fingerprintDomain = "oncekv.fingerprint\x00"

// fingerprint returns what the mark of req stores and later requests of its
// key must match: the SHA-256 of the Payload, or, when the caller gave
// one, of its Fingerprint, cut to what a mark keeps of it (see
// layout.Fingerprint) so that it compares equal to a decoded mark's.
func fingerprint(req *Request) ([sha256.Size]byte, error) {
	switch n := len(req.Fingerprint); {
	case n == 0:
		return layout.Fingerprint(sha256.Sum256(req.Payload)), nil
	case n > MaxFingerprintSize:
		return [sha256.Size]byte{}, fmt.Errorf("%w: %d bytes, over the limit of %d (pass a hash of the payload, not the payload)",
			ErrInvalidFingerprint, n, MaxFingerprintSize)
	}
	h := sha256.New()
	h.Write([]byte(fingerprintDomain))
	h.Write(req.Fingerprint)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return layout.Fingerprint(sum), nil
}

func timeFromNano(n int64) time.Time { return time.Unix(0, n) }
