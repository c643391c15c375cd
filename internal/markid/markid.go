// Package markid computes what identifies a request in every oncekv store:
// its mark key, the claim key handed to external systems, and the
// fingerprint its mark keeps. The embedded store and the PostgreSQL store
// (module oncekv/postgres) both call it, so that a key claimed, applied or
// loaded in one is the same key, with the same Claim.Key and the same
// fingerprint, in the other.
package markid

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/layout"
)

// MaxFingerprintSize is the longest Request.Fingerprint (the root's
// MaxFingerprintSize).
const MaxFingerprintSize = 64

// fingerprintDomain keeps a caller's fingerprint apart from payload
// hashes: hashed with it, a Fingerprint never stores the same value as
// the SHA-256 of some Payload.
const fingerprintDomain = "oncekv.fingerprint\x00"

// Key returns the mark key of (handler, key): the handler's length
// (2 bytes, big-endian), the handler, the key. Errors:
// base.ErrHandlerRequired, base.ErrKeyRequired, and base.ErrKeyTooLarge
// when the two do not fit in one bbolt key (layout.MaxMarkKeySize).
func Key(handler, key string) ([]byte, error) {
	switch {
	case handler == "":
		return nil, base.ErrHandlerRequired
	case key == "":
		return nil, base.ErrKeyRequired
	}
	if err := layout.CheckMarkKey(handler, key); err != nil {
		return nil, err
	}
	return layout.MarkKey(handler, key), nil
}

// ClaimKey is Claim.Key of the mark key mkey: 64 lowercase hex digits of
// its SHA-256.
func ClaimKey(mkey []byte) string {
	sum := sha256.Sum256(mkey)
	return hex.EncodeToString(sum[:])
}

// Fingerprint returns what the mark of a request stores and later
// requests of its key must match: the SHA-256 of payload, or, when the
// caller gave one, of its fingerprint (in a domain of its own), cut to
// what a mark keeps of it (layout.Fingerprint: the first
// layout.FingerprintSize bytes, the rest zero). Error:
// base.ErrInvalidFingerprint for a fingerprint over MaxFingerprintSize.
func Fingerprint(payload, fingerprint []byte) ([sha256.Size]byte, error) {
	switch n := len(fingerprint); {
	case n == 0:
		return layout.Fingerprint(sha256.Sum256(payload)), nil
	case n > MaxFingerprintSize:
		return [sha256.Size]byte{}, fmt.Errorf("%w: %d bytes, over the limit of %d (pass a hash of the payload, not the payload)",
			base.ErrInvalidFingerprint, n, MaxFingerprintSize)
	}
	h := sha256.New()
	h.Write([]byte(fingerprintDomain))
	h.Write(fingerprint)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return layout.Fingerprint(sum), nil
}
