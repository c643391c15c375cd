package jcs

import (
	"crypto/sha256"

	"github.com/oncekv/oncekv"
)

// FingerprintSize is the length of a Fingerprint: a SHA-256, well within
// oncekv.MaxFingerprintSize.
const FingerprintSize = sha256.Size

// Fingerprint returns the SHA-256 of data's canonical form (Canonicalize),
// FingerprintSize bytes, to put in oncekv.Request.Fingerprint: two texts
// of the same JSON value have the same fingerprint, whatever their member
// order, whitespace, escapes or number spelling, so a producer that
// re-encodes a message does not read as key reuse. Any client can compute
// it alike: SHA-256 over the RFC 8785 bytes, nothing added. Its errors are
// Canonicalize's.
func Fingerprint(data []byte) ([]byte, error) {
	return canonicalize(data, func(canonical []byte) []byte {
		sum := sha256.Sum256(canonical)
		return sum[:]
	})
}

// Request returns the oncekv.Request of one delivery of a JSON body: its
// Payload is body itself, unchanged, and its Fingerprint body's
// Fingerprint, so that every delivery of the key, however it was
// serialised, is a duplicate, and a body with another value is
// oncekv.ErrKeyReuse. Its errors are Canonicalize's: a body with no
// canonical form cannot be fingerprinted this way (compare its bytes
// instead, with a Request without Fingerprint, but then for every delivery
// of the key).
func Request(handler, key string, body []byte) (oncekv.Request, error) {
	fp, err := Fingerprint(body)
	if err != nil {
		return oncekv.Request{}, err
	}
	return oncekv.Request{Handler: handler, Key: key, Payload: body, Fingerprint: fp}, nil
}
