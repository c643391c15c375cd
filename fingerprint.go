package oncekv

import (
	"crypto/sha256"

	"github.com/oncekv/oncekv/internal/markid"
)

// MaxFingerprintSize is the longest Request.Fingerprint: room for a SHA-512
// or a version string, and short enough to catch a payload passed where
// its fingerprint was meant.
const MaxFingerprintSize = markid.MaxFingerprintSize

// fingerprint returns what the mark of req stores and later requests of its
// key must match: the SHA-256 of the Payload, or, when the caller gave
// one, of its Fingerprint, cut to what a mark keeps of it (see
// layout.Fingerprint) so that it compares equal to a decoded mark's. The
// PostgreSQL store computes it alike (internal/markid).
func fingerprint(req *Request) ([sha256.Size]byte, error) {
	return markid.Fingerprint(req.Payload, req.Fingerprint)
}
