package oncekv

import (
	"crypto/sha256"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/markid"
)

// Request is one delivery of a logical operation.
type Request struct {
	// Handler names the operation or consumer; dedup is per (Handler, Key).
	// Required.
	Handler string
	// Key is the idempotency key, created once with the intent and reused by
	// every retry. Required. Handler and Key together fit in 32766 bytes.
	Key string
	// Payload is the operation's content: a later request of the key with
	// another payload is rejected with ErrKeyReuse.
	Payload []byte
	// Fingerprint, when not empty, identifies the content instead of
	// Payload's bytes, for content that can arrive as other bytes (JSON
	// re-encoded, a send timestamp): requests of the key are then compared
	// by it, and every delivery of the key must carry one. At most
	// MaxFingerprintSize bytes.
	Fingerprint []byte
}

// Result is the outcome of an applied or deduplicated request.
type Result struct {
	// Response is what the effect returned when it first ran, the same
	// bytes for every duplicate (nil and empty stay distinct); the caller's.
	Response []byte
	// Duplicate: the key was applied before and the effect did not run.
	Duplicate bool
	// FirstSeen is when the mark was first written; from a tombstone, to
	// the minute.
	FirstSeen time.Time
	// ResponseExpired: a duplicate answered from a tombstone, after
	// Options.Retention, within Options.TombstoneRetention. The key was
	// applied (or failed: the error is a *FailedError without its message),
	// and the effect did not run again, but the stored response is gone:
	// Response is nil. No fingerprint is left either, so a payload other
	// than the first is not detected (no ErrKeyReuse) (docs/window.md).
	ResponseExpired bool
}

// BatchResult is the outcome of one request of ApplyBatch.
type BatchResult struct {
	Result
	Err error // this request's error, as Apply would have returned it
}

// MaxResponseSize is the largest response (with a permanent error's
// message) a mark holds: bbolt's value limit less room for the rest of the
// mark. A larger one fails its request with ErrResponseTooLarge.
const MaxResponseSize = bolt.MaxValueSize - markOverhead

// markOverhead bounds the rest of a mark's record: envelope, state,
// fingerprint, integers and length prefixes (under 100 bytes).
const markOverhead = 1 << 10

// checkResponse returns ErrResponseTooLarge, naming both sizes, for n bytes
// that do not fit in a mark, before the mark is written: the one request
// fails, not the transaction its commit shares.
func (db *DB) checkResponse(n int) error {
	if n > db.maxResponse {
		return fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrResponseTooLarge, n, db.maxResponse)
	}
	return nil
}

// markKey validates req's handler and key and returns its mark key.
func markKey(req *Request) ([]byte, error) { return markid.Key(req.Handler, req.Key) }

// MaxFingerprintSize is the longest Request.Fingerprint: room for a SHA-512,
// short enough to catch a payload passed instead.
const MaxFingerprintSize = markid.MaxFingerprintSize

// fingerprint returns what req's mark stores and later requests must match:
// the SHA-256 of the Payload, or of the Fingerprint, cut to what a mark
// keeps. The PostgreSQL store computes it alike (internal/markid).
func fingerprint(req *Request) ([sha256.Size]byte, error) {
	return markid.Fingerprint(req.Payload, req.Fingerprint)
}

func timeFromNano(n int64) time.Time { return time.Unix(0, n) }
