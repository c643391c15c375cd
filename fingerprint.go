package oncekv

import (
	"crypto/sha256"
	"fmt"

	"github.com/oncekv/oncekv/internal/layout"
)

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
